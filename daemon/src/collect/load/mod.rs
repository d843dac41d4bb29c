//! A run's requests, folded as they finished ([`LoadFold`]), set into the time line's windows
//! (by intended start) with each window's phase, and joined with the kernel's view of the
//! server.
//!
//! [`LoadFold`]: super::load_fold::LoadFold

pub mod clock;
mod duplicates;
mod fold;
mod joins;
mod marks;
mod phases;

pub use duplicates::{Duplicates, Sent, duplicate_prefills};
pub use fold::fold_records;

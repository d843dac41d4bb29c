//! Named signals read from a window, and the run's baseline of each.
//!
//! Rules refer to signals by name (`Signal`), so the rule table stays data: a signal knows how
//! to read itself from a `Window`, and why it may be absent.

mod applies;
mod read;
mod signal;
mod source;

pub use read::WARMUP_WINDOWS;
pub use signal::{FIRST_TOKEN_WAKEUPS, Signal};
pub use source::Source;

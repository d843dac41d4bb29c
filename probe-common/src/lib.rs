//! Types shared by inferscope's kernel programs (`probe-ebpf`) and the daemon.
//!
//! Everything here is `#[repr(C)]`, `Copy`, free of `bool`/`Option`, padded explicitly, and
//! size-checked at compile time, so both sides agree on the bytes without a schema.
#![no_std]

pub mod cuda;
pub mod runqlat;
pub mod sockets;

/// `tgid -> u8`: the watched processes, shared by every hook family.
pub const MAP_WATCH: &str = "WATCH";
/// `Array<u32>[1]`: 0 = every process is watched, 1 = only those in [`MAP_WATCH`].
pub const MAP_WATCH_MODE: &str = "WATCH_MODE";

/// Asserts at compile time that a shared type has the size both sides expect.
macro_rules! assert_size {
    ($t:ty, $n:expr) => {
        const _: () = assert!(core::mem::size_of::<$t>() == $n);
    };
}
pub(crate) use assert_size;

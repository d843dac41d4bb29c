//! Types shared by inferscope's kernel programs (`probe-ebpf`) and the daemon.
//!
//! Everything here is `#[repr(C)]`, `Copy`, free of `bool`/`Option`, padded explicitly, and
//! size-checked at compile time, so both sides agree on the bytes without a schema.
#![no_std]

pub mod cuda;

/// Slot of drop counter `kind` of hook `hook` in a family's per-CPU drops map, which holds
/// `hooks * kinds` counters: losses are counted per hook (the program that lost the item), not
/// per family.
#[must_use]
pub const fn drop_slot(hook: u32, kind: u32, kinds: u32) -> u32 {
    hook * kinds + kind
}
pub mod runqlat;
pub mod sockets;

/// `tgid -> u8`: the watched processes, shared by every hook family.
pub const MAP_WATCH: &str = "WATCH";
/// `Array<u32>[1]`: 0 = every process is watched, 1 = only those in [`MAP_WATCH`].
pub const MAP_WATCH_MODE: &str = "WATCH_MODE";
/// `Array<u64>`: [`MAP_WATCH`] again as a bitmap (bit `tgid % 64` of word `tgid / 64`), for
/// hot paths: an array lookup is inlined by the verifier, a hash lookup is a helper call.
pub const MAP_WATCH_BITS: &str = "WATCH_BITS";
/// Words in [`MAP_WATCH_BITS`]: covers every tgid below `PID_MAX_LIMIT` (2^22 on 64-bit).
pub const WATCH_BITS_WORDS: u32 = 1 << 16;

/// Asserts at compile time that a shared type has the size both sides expect.
macro_rules! assert_size {
    ($t:ty, $n:expr) => {
        const _: () = assert!(core::mem::size_of::<$t>() == $n);
    };
}
pub(crate) use assert_size;

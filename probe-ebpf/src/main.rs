//! inferscope's kernel programs. One module per hook family; entry points are thin wrappers
//! around `try_*` functions. Built for `bpfel-unknown-none` by `daemon/build.rs`.
#![no_std]
#![no_main]
// The BPF target has no `AtomicU64::fetch_add` in core; the intrinsic lowers to BPF_ATOMIC_ADD.
#![feature(core_intrinsics)]
#![allow(internal_features)]

mod cuda;
mod runqlat;
mod runqlat_raw;
mod sockets;
mod watch;

/// `*dst += v` as one BPF atomic add, for counters shared across CPUs.
///
/// # Safety
/// `dst` must point into a live map value.
#[inline(always)]
pub(crate) unsafe fn atomic_add(dst: *mut u64, v: u64) {
    use core::intrinsics::{AtomicOrdering, atomic_xadd};
    // SAFETY: the caller guarantees `dst` is a valid map value pointer.
    unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(dst, v) };
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";

//! The kernel programs stamp events with `bpf_ktime_get_ns` (`CLOCK_MONOTONIC`); the load
//! generator anchors its run on the same clock so requests and kernel events can be joined.

/// `CLOCK_MONOTONIC` now, in ns: the time base of every kernel event.
#[must_use]
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

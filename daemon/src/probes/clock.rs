//! The kernel programs stamp events with `bpf_ktime_get_ns` (CLOCK_MONOTONIC); these convert
//! between that clock, `std::time::Instant` (also CLOCK_MONOTONIC on Linux) and wall time.

use std::time::{Duration, Instant, SystemTime};

/// CLOCK_MONOTONIC now, in ns: the time base of every kernel event.
#[must_use]
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Kernel time of an `Instant` (same clock, different origin).
#[must_use]
pub fn instant_to_ns(t: Instant) -> u64 {
    let (now_i, now_ns) = (Instant::now(), monotonic_ns());
    if t <= now_i {
        now_ns.saturating_sub((now_i - t).as_nanos() as u64)
    } else {
        now_ns + (t - now_i).as_nanos() as u64
    }
}

/// Wall-clock time of a kernel timestamp.
#[must_use]
pub fn ns_to_system(ns: u64) -> SystemTime {
    let (now_sys, now_ns) = (SystemTime::now(), monotonic_ns());
    if ns <= now_ns {
        now_sys - Duration::from_nanos(now_ns - ns)
    } else {
        now_sys + Duration::from_nanos(ns - now_ns)
    }
}

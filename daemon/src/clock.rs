//! The clocks a run is stamped with. The kernel programs stamp events with `bpf_ktime_get_ns`
//! (`CLOCK_MONOTONIC`); reports and time lines use Unix time; the load generator schedules on
//! [`Instant`]. [`RunClock`] reads all three back to back, so a run's offsets convert exactly
//! between them and requests can be joined with kernel events.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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

/// Time since the Unix epoch now (zero on a clock set before 1970).
fn since_epoch() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// Wall-clock time now, Unix ns.
#[must_use]
pub fn unix_ns() -> u64 {
    since_epoch().as_nanos() as u64
}

/// Wall-clock time now, Unix ms.
#[must_use]
pub fn unix_ms() -> u64 {
    since_epoch().as_millis() as u64
}

/// Wall-clock time now, Unix seconds.
#[must_use]
pub fn unix_s() -> u64 {
    since_epoch().as_secs()
}

/// A run's start on the three clocks, read back to back.
#[derive(Debug, Clone, Copy)]
pub struct RunClock {
    /// For schedules and elapsed times.
    pub t0: Instant,
    /// Unix ns: where record offsets start in reports.
    pub unix_ns: u64,
    /// `CLOCK_MONOTONIC` ns: where record offsets start on the kernel's clock.
    pub monotonic_ns: u64,
}

impl RunClock {
    /// Starts the run's clock now.
    #[must_use]
    pub fn start() -> Self {
        Self {
            t0: Instant::now(),
            unix_ns: unix_ns(),
            monotonic_ns: monotonic_ns(),
        }
    }
}

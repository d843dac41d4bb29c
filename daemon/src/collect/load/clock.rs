//! The run's clock: a record time (µs since the run's start) or a kernel time
//! (`CLOCK_MONOTONIC` ns) in Unix ms, from the two clocks the run read at its start.

use crate::measure::StressReport;

/// Unix ms of a record time (µs since the run's start).
pub(super) fn unix_ms(report: &StressReport, us: u64) -> u64 {
    report.started_unix_ns / 1_000_000 + us / 1000
}

/// Unix ms of a kernel time (`CLOCK_MONOTONIC` ns, as the probes stamp their events).
#[must_use]
pub fn kernel_unix_ms(report: &StressReport, ns: u64) -> u64 {
    (report.started_unix_ns + ns.saturating_sub(report.started_monotonic_ns)) / 1_000_000
}

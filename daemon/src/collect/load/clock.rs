//! The run's clock: a record time, µs since the run's start, in Unix ms.

use crate::measure::StressReport;

/// Unix ms of a record time (µs since the run's start).
pub(super) fn unix_ms(report: &StressReport, us: u64) -> u64 {
    report.started_unix_ns / 1_000_000 + us / 1000
}

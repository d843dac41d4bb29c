//! The scenario's events marked on the time line.

use super::clock::unix_ms;
use crate::collect::timeline::{Mark, Timeline};
use crate::measure::StressReport;

/// Marks the scenario's events on the time line.
pub(super) fn mark_events(timeline: &mut Timeline, report: &StressReport) {
    timeline.marks = report
        .events
        .iter()
        .map(|e| Mark {
            unix_ms: unix_ms(report, e.at_us),
            phase: report.phases.get(e.phase as usize).map(|p| p.name.clone()),
            what: format!("{} -> {}", e.request, e.outcome),
        })
        .collect();
    timeline.marks.sort_by_key(|m| m.unix_ms);
}

/// Marks of `phase` sent before `end_unix_ms`.
pub(super) fn timeline_marks_before(marks: &[Mark], phase: Option<&str>, end_unix_ms: u64) -> u64 {
    marks
        .iter()
        .filter(|m| m.phase.as_deref() == phase && m.unix_ms < end_unix_ms)
        .count() as u64
}

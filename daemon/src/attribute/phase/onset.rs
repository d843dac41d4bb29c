//! Which of `compute` and `queue` came first in a phase, and the hint of its verdict.

use super::summary::MIN_CAUSE_WINDOWS;
use crate::attribute::WindowVerdict;
use crate::attribute::advice;
use crate::attribute::baseline::Workload;
use crate::attribute::resources::Occupancy;
use crate::attribute::verdict::Cause;
use crate::collect::timeline::Window;

/// Which of `compute` and `queue` came first in the phase's windows, when both did (each in at
/// least [`MIN_CAUSE_WINDOWS`] windows), and the hint of the `dominant` cause for the engine the
/// windows' scrapes recognised, led by the order in words when it is one of them: `compute
/// saturated first (+2 s), requests queued from +5 s`.
pub(super) fn onset(
    dominant: Cause,
    idx: &[usize],
    windows: &[Window],
    verdicts: &[WindowVerdict],
    admission_cap: Option<f64>,
) -> (Option<Cause>, String) {
    let (came_first, order) = order(idx, windows, verdicts);
    // Advice never leans on room the phase's own windows show full.
    let occupancies: Vec<Occupancy> = idx
        .iter()
        .map(|&i| Occupancy::of(&windows[i], admission_cap))
        .collect();
    let searches = idx
        .first()
        .is_some_and(|&i| Workload::of(&windows[i]) == Workload::Vector);
    let advice = if dominant == Cause::Queue && searches {
        advice::VECTOR_QUEUE.to_owned()
    } else {
        advice::hint(
            dominant,
            advice::engine_of(idx.iter().map(|&i| &windows[i])),
            &advice::Headroom::of(&occupancies),
        )
    };
    let hint = match order {
        Some(order) if matches!(dominant, Cause::Compute | Cause::Queue) => {
            format!("{order}: {advice}")
        }
        _ => advice,
    };
    (came_first, hint)
}

/// See [`onset`]: the cause that came first, and the order in words.
fn order(
    idx: &[usize],
    windows: &[Window],
    verdicts: &[WindowVerdict],
) -> (Option<Cause>, Option<String>) {
    let start = idx.first().map_or(0, |&i| windows[i].start_unix_ms);
    // One window is an anecdote: each needs two to have happened at all.
    let first = |c: Cause| {
        let of: Vec<usize> = idx
            .iter()
            .copied()
            .filter(|&i| verdicts[i].verdict.cause == c)
            .collect();
        (of.len() >= MIN_CAUSE_WINDOWS)
            .then(|| windows[of[0]].start_unix_ms.saturating_sub(start) as f64 / 1000.0)
    };
    match (first(Cause::Compute), first(Cause::Queue)) {
        (Some(c), Some(q)) if c <= q => (
            Some(Cause::Compute),
            Some(format!(
                "compute saturated first (+{c:.0} s), requests queued from +{q:.0} s"
            )),
        ),
        (Some(c), Some(q)) => (
            Some(Cause::Queue),
            Some(format!(
                "requests queued first (+{q:.0} s), steps slowed from +{c:.0} s"
            )),
        ),
        _ => (None, None),
    }
}

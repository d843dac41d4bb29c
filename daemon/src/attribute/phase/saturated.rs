//! A resource full with requests waiting for it through a phase, and what a saturated baseline
//! means for the phases compared against it.

use super::summary::{DOMINANT_MIN_SHARE, MIN_CAUSE_WINDOWS, PhaseSummary};
use crate::attribute::baseline::{self, Workload};
use crate::attribute::resources::Occupancy;
use crate::collect::timeline::{Timeline, Window};

/// The resource the phase's requests waited for, when the resource model found one full with
/// requests waiting in at least [`DOMINANT_MIN_SHARE`] of its windows (and two): the window with
/// the most waiting, in words.
pub(super) fn saturated(idx: &[usize], windows: &[Window], cap: Option<f64>) -> Option<String> {
    let found: Vec<Occupancy> = idx
        .iter()
        .filter(|&&i| crate::attribute::resources::engine_judges(&windows[i]))
        .map(|&i| Occupancy::of(&windows[i], cap))
        .filter(|o| o.bottleneck().is_some())
        .collect();
    let least = MIN_CAUSE_WINDOWS.min(idx.len());
    if found.len() < least || (found.len() as f64) < DOMINANT_MIN_SHARE * idx.len() as f64 {
        return None;
    }
    found
        .iter()
        .max_by(|a, b| {
            a.waiting
                .unwrap_or(0.0)
                .total_cmp(&b.waiting.unwrap_or(0.0))
        })
        .map(|o| {
            let what = o.describe();
            let b = o.bottleneck().expect("filtered on it");
            match b.resource {
                Some(_) => what,
                None => format!("{what}, neither the KV cache nor the slots full"),
            }
        })
}

/// A baseline phase that is saturated is reported as such, and every other phase of its
/// workload (its first window's, in `timeline`) says what that means for its comparison.
pub(super) fn note_saturated_baselines(phases: &mut [PhaseSummary], timeline: &Timeline) {
    let workloads: Vec<Option<Workload>> = phases
        .iter()
        .map(|p| {
            // By its start: a report's windows need not be contiguous (the daemon's selections).
            let first = timeline
                .windows
                .iter()
                .find(|w| w.start_unix_ms == p.start_unix_ms);
            first.map(Workload::of)
        })
        .collect();
    for kind in [Workload::Llm, Workload::Vector, Workload::Http] {
        note_one(phases, &workloads, kind);
    }
}

fn note_one(phases: &mut [PhaseSummary], workloads: &[Option<Workload>], kind: Workload) {
    let mine = |i: usize| workloads[i] == Some(kind);
    let saturated_baseline = (0..phases.len())
        .filter(|&i| mine(i))
        .map(|i| &phases[i])
        .find(|p| !p.drain && baseline::is_baseline_name(&p.name) && p.saturated.is_some())
        .map(|p| (p.name.clone(), p.saturated.clone().unwrap_or_default()));
    let Some((name, what)) = saturated_baseline else {
        return;
    };
    for (i, p) in phases.iter_mut().enumerate() {
        if !mine(i) {
            continue;
        }
        if p.name == name {
            p.notes
                .push(format!("the baseline is not a healthy reference: {what}"));
        } else {
            p.notes.push(format!(
                "compared against a saturated baseline ({what}): rises over it understate the \
                 slowdown, and a resource full in both phases is named by what is full, not by \
                 a rise"
            ));
        }
    }
}

//! The time line's phases, in order of first appearance, each summarised, with its drain apart.

use super::overload::overload;
use super::saturated::{note_saturated_baselines, saturated};
use super::summarise_one::summarise_one;
use super::summary::{DOMINANT_MIN_SHARE, MIN_CAUSE_WINDOWS, PhaseSummary};
use crate::attribute::WindowVerdict;
use crate::attribute::baseline::Baselines;
use crate::attribute::verdict::Cause;
use crate::collect::timeline::{Timeline, Window};

/// Summarises each phase, in order of first appearance; a phase's drain (see
/// `split_drain`) follows it as a summary of its own. `admission_cap` is the server's slot
/// cap (`attribute::resources::admission_cap`).
#[must_use]
pub fn summarise(
    timeline: &Timeline,
    verdicts: &[WindowVerdict],
    baselines: &Baselines,
    admission_cap: Option<f64>,
) -> Vec<PhaseSummary> {
    let windows = &timeline.windows;
    let mut names: Vec<String> = Vec::new();
    for w in windows {
        let n = phase_name(w);
        if !names.contains(&n) {
            names.push(n);
        }
    }
    let mut out = Vec::new();
    for name in names {
        let idx: Vec<usize> = (0..windows.len())
            .filter(|&i| phase_name(&windows[i]) == name)
            .collect();
        let (sending, drain) = split_drain(&idx, windows);
        let summary = |name: String, idx: &[usize], drain: bool| {
            let mut p = summarise_one(
                name,
                idx,
                drain,
                windows,
                verdicts,
                baselines,
                admission_cap,
            );
            p.saturated = saturated(idx, windows, admission_cap);
            if p.dominant == Cause::Compute {
                let ws: Vec<&Window> = idx.iter().map(|&i| &windows[i]).collect();
                p.bound = crate::attribute::bound::Bound::of(&ws);
                if let Some(b) = &p.bound {
                    p.hint = format!("{}; {}", b.line(), p.hint);
                }
            }
            p
        };
        let mut p = summary(name.clone(), sending, false);
        p.marks = timeline
            .marks
            .iter()
            .filter(|m| m.phase.as_deref() == Some(p.name.as_str()))
            .map(|m| {
                let at = m.unix_ms.saturating_sub(p.start_unix_ms) as f64 / 1000.0;
                format!("{} at +{at:.1} s", m.what)
            })
            .collect();
        let all: Vec<&Window> = idx.iter().map(|&i| &windows[i]).collect();
        p.overload = overload(&p, &all);
        p.energy = crate::attribute::energy::PhaseEnergy::of(&all);
        out.push(p);
        if !drain.is_empty() {
            out.push(summary(format!("{name} (drain)"), drain, true));
        }
    }
    note_saturated_baselines(&mut out);
    out
}

/// The phase's windows and its drain: the windows after the last one it sent in or meant to
/// (no request of the phase intended to start in them, none left unsent there), apart when
/// they are at least [`MIN_CAUSE_WINDOWS`] and [`DOMINANT_MIN_SHARE`] of the phase, so many
/// that they could decide its verdict (an overloaded phase drains to its timeout: 60 of 90
/// windows on the H200). A shorter tail stays with the phase.
fn split_drain<'a>(idx: &'a [usize], windows: &[Window]) -> (&'a [usize], &'a [usize]) {
    let sends = |i: usize| {
        windows[i]
            .load
            .as_ref()
            .is_some_and(|l| l.requests > 0 || l.unsent.is_some())
    };
    let Some(last) = idx.iter().rposition(|&i| sends(i)) else {
        return (idx, &[]);
    };
    let drain = &idx[last + 1..];
    if drain.len() >= MIN_CAUSE_WINDOWS
        && drain.len() as f64 >= DOMINANT_MIN_SHARE * idx.len() as f64
    {
        (&idx[..=last], drain)
    } else {
        (idx, &[])
    }
}

fn phase_name(w: &Window) -> String {
    w.phase.clone().unwrap_or_else(|| "run".to_owned())
}

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
        let drain = (!drain.is_empty()).then(|| {
            let mut d = summary(format!("{name} (drain)"), drain, true);
            carry_backlog(&mut d, &p);
            d
        });
        out.push(p);
        out.extend(drain);
    }
    note_saturated_baselines(&mut out, timeline);
    out
}

/// A drain sends nothing: every request it answers was sent by its phase and waited for what
/// the phase's requests waited for, and the evidence of that wait (their read delay, their
/// queue time) sits in the windows they were sent in. So when the drain's own windows find no
/// cause (`unexplained`: its latency rose, nothing in them says why), it carries the phase's,
/// and says so; a cause its own windows show stands.
fn carry_backlog(drain: &mut PhaseSummary, phase: &PhaseSummary) {
    if drain.dominant != Cause::Unexplained
        || matches!(phase.dominant, Cause::None | Cause::Unexplained)
    {
        return;
    }
    drain.notes.push(format!(
        "nothing was sent in these windows: the requests answered are {}'s, which waited for {} \
         (the evidence is in the windows they were sent in); these windows show no other cause",
        phase.name, phase.dominant
    ));
    drain.dominant = phase.dominant;
    drain.confidence = phase.confidence;
    drain.evidence.clone_from(&phase.evidence);
    drain.hint.clone_from(&phase.hint);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-window phase `name` summarised, then judged `cause`.
    fn judged(name: &str, cause: Cause) -> PhaseSummary {
        let mut t = Timeline::new(0, 1000);
        t.at(500).phase = Some(name.into());
        let mut p = crate::attribute::attribute(&t).phases.remove(0);
        p.dominant = cause;
        p
    }

    #[test]
    fn a_drain_without_a_cause_of_its_own_carries_its_phases() {
        let cooldown = judged("cooldown", Cause::Queue);
        let mut drain = judged("cooldown (drain)", Cause::Unexplained);
        carry_backlog(&mut drain, &cooldown);
        assert_eq!(drain.dominant, Cause::Queue);
        assert!(drain.notes[0].contains("cooldown's"), "{:?}", drain.notes);
        // A cause the drain's own windows show stands.
        let mut own = judged("cooldown (drain)", Cause::Network);
        carry_backlog(&mut own, &cooldown);
        assert_eq!(own.dominant, Cause::Network);
        // A phase without a cause lends none.
        let mut drain = judged("peak (drain)", Cause::Unexplained);
        carry_backlog(&mut drain, &judged("peak", Cause::None));
        assert_eq!(drain.dominant, Cause::Unexplained);
        assert!(drain.notes.is_empty());
    }
}

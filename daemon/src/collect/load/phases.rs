//! Each window's phase: the latest request's before it ended, and the planned span of a
//! phase whose generator fell short, with what it never sent.

use std::collections::BTreeMap;

use super::clock::unix_ms;
use crate::collect::load_fold::Acc;
use crate::collect::timeline::{LoadSignals, Timeline};
use crate::measure::StressReport;

/// Sets every window's phase without one: the phase of the latest request that started
/// before it ended, so the tail of a phase (requests still running) stays with it.
pub(super) fn label_phases(
    timeline: &mut Timeline,
    report: &StressReport,
    accs: &BTreeMap<usize, Acc>,
) {
    let mut current = None;
    let mut next = accs.iter().peekable();
    for (i, w) in timeline.windows.iter_mut().enumerate() {
        while let Some((_, a)) = next.next_if(|(j, _)| **j <= i) {
            current = Some(a.latest.1);
        }
        if w.phase.is_none()
            && let Some(p) = current
        {
            w.phase = report.phases.get(p as usize).map(|p| p.name.clone());
        }
    }
}

/// Arrivals a phase's schedule asked for and the generator never sent (it fell behind past the
/// phase's end, or was stopped) belong to the windows of the phase's planned span where its
/// sends fell short. Those windows are the phase's own whatever the records say (phases start
/// one after another at their planned ends; a window with none of its records went to the
/// phase before, and one after its last send would read as its drain), and each carries its
/// part of what was never sent, in proportion to its shortfall (the intended rate times its
/// time in the span, less what it sent), so that a phase starved whole or in part is in the
/// report and judged (`loadgen`) instead of vanishing into the phase before or its drain. Only
/// windows the collectors closed: a run whose first phase sent nothing has no window before
/// its first request.
pub(super) fn spread_unsent(timeline: &mut Timeline, report: &StressReport) {
    let mut start_s = 0.0;
    for (k, p) in report.phases.iter().enumerate() {
        let (from_s, to_s) = (start_s, start_s + p.elapsed_s.max(0.0));
        start_s += p.duration_s;
        let unsent = p.counts.scheduled.saturating_sub(p.counts.finished);
        if unsent == 0 || to_s <= from_s {
            continue;
        }
        let at = |s: f64| unix_ms(report, (s * 1e6) as u64);
        let (from, to) = (at(from_s), at(to_s));
        let earlier = |name: &str| report.phases[..k].iter().any(|q| q.name == name);
        let mut short: Vec<(usize, f64)> = Vec::new();
        for (i, w) in timeline.windows.iter_mut().enumerate() {
            let (w_from, w_to) = (w.start_unix_ms, w.start_unix_ms + w.len_ms);
            if w_from < from || w_from >= to {
                continue;
            }
            match w.phase.as_deref() {
                Some(name) if name == p.name => {}
                Some(name) if !earlier(name) => continue,
                _ => w.phase = Some(p.name.clone()),
            }
            let in_span_s = (w_to.min(to) - w_from) as f64 / 1000.0;
            let sent = w.load.as_ref().map_or(0, |l| l.requests) as f64;
            let intended = p.target_rate.map_or(1.0, |r| r * in_span_s);
            short.push((i, (intended - sent).max(0.0)));
        }
        let total: f64 = short.iter().map(|(_, s)| s).sum();
        if total <= 0.0 {
            continue;
        }
        // Whole arrivals by their running sum, so that the parts add up to `unsent`.
        let (mut acc, mut given) = (0.0, 0);
        for (i, s) in short {
            acc += s;
            let upto = ((acc / total) * unsent as f64).round() as u64;
            let n = upto - given;
            given = upto;
            if n == 0 {
                continue;
            }
            let load = timeline.windows[i]
                .load
                .get_or_insert_with(LoadSignals::default);
            load.target_rps = p.target_rate;
            load.unsent = Some(n);
        }
    }
}

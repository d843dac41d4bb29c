//! Baselines for a time line that keeps growing (the node daemon), and the verdict of one
//! window as it closes.
//!
//! `stress --explain` attributes a finished run: its baseline is a phase named `baseline`, else
//! its first phase (see [`super::baseline`]). The daemon has no finished run. Its baseline per
//! workload is:
//!
//! 1. the windows of the latest phase named `baseline` (or `*-baseline`, `baseline-*`,
//!    `run-N.baseline`) marked at or before the window judged (`POST /api/v1/marks`, or a run
//!    posted to the control API);
//! 2. else a **rolling baseline**: of the last [`ROLLING_WINDOWS`] windows before the one
//!    judged, those whose reference latency was at or below the running median of it. The
//!    reference latency is the first of the client's TTFT p50, the kernel's server-side first
//!    token p50, the kernel's whole exchange p50 and the server's mean TTFT that the windows
//!    have. Windows above the median (the slow half) never become the reference, so a burst
//!    stands out against the calm windows around it. Without any latency (an idle server), the
//!    last windows themselves are the baseline.
//!
//! A rolling baseline follows a lasting change: after [`ROLLING_WINDOWS`] windows of it the
//! change is the new normal and the relative tests stop firing; the absolute triggers (a full
//! KV cache, preemptions, out-of-memory returns, retransmits, errors) still name the cause.

use super::{
    Baseline, Baselines, WindowVerdict, Workload, baseline::Ctx, baseline::is_baseline_name,
    evaluate, rules, signals::Signal,
};
use crate::collect::timeline::Timeline;

/// Windows looked back over for the rolling baseline.
pub const ROLLING_WINDOWS: usize = 120;

/// Fewest windows with a latency for the median to choose from; below it, every recent window
/// is the baseline.
const MIN_WITH_LATENCY: usize = 3;

/// Latencies a window is placed by, best first.
const REFERENCE: [Signal; 4] = [
    Signal::TtftP50Ms,
    Signal::KernelFirstTokenP50Ms,
    Signal::KernelExchangeP50Ms,
    Signal::ServerTtftMeanMs,
];

/// The baselines window `upto` (an index into `timeline`) is judged against: per workload, the
/// marked `baseline` phase, else the rolling baseline of the windows before it.
#[must_use]
pub fn baselines_at(timeline: &Timeline, upto: usize) -> Baselines {
    Baselines(
        [Workload::Llm, Workload::Vector, Workload::Http]
            .into_iter()
            .filter_map(|k| baseline_at(timeline, k, upto))
            .collect(),
    )
}

fn baseline_at(timeline: &Timeline, workload: Workload, upto: usize) -> Option<Baseline> {
    let ws = &timeline.windows;
    if ws.is_empty() {
        return None;
    }
    let upto = upto.min(ws.len() - 1);
    let mine = |i: &usize| Workload::of(&ws[*i]) == workload;
    // The baseline phase in force: the latest marked before (or at) the window judged.
    if let Some(phase) = (0..=upto)
        .rev()
        .filter(mine)
        .find_map(|i| ws[i].phase.as_deref().filter(|p| is_baseline_name(p)))
    {
        let windows = (0..ws.len())
            .filter(mine)
            .filter(|&i| ws[i].phase.as_deref() == Some(phase))
            .collect();
        return Some(Baseline::from_windows(
            timeline,
            workload,
            Some(phase.to_owned()),
            windows,
        ));
    }
    // The window judged belongs to its own rolling baseline only when it is the first one.
    let end = if upto == 0 { 1 } else { upto };
    let recent: Vec<usize> = (end.saturating_sub(ROLLING_WINDOWS)..end)
        .filter(mine)
        .collect();
    if recent.is_empty() {
        return None;
    }
    let reference = REFERENCE.iter().find(|s| {
        recent
            .iter()
            .filter(|&&i| s.raw(&ws[i], i).is_some())
            .count()
            >= MIN_WITH_LATENCY
    });
    let windows = match reference {
        Some(s) => {
            let vals: Vec<(usize, f64)> = recent
                .iter()
                .filter_map(|&i| Some((i, s.raw(&ws[i], i)?)))
                .collect();
            let all: Vec<f64> = vals.iter().map(|(_, v)| *v).collect();
            let m = crate::quantile::exact::median(&all)?;
            vals.into_iter()
                .filter(|(_, v)| *v <= m)
                .map(|(i, _)| i)
                .collect()
        }
        None => recent,
    };
    Some(Baseline::from_windows(timeline, workload, None, windows))
}

/// The verdict of window `index` of `timeline` under [`baselines_at`] and the default rules.
/// `None` when there is no such window.
#[must_use]
pub fn verdict_at(timeline: &Timeline, index: usize) -> Option<WindowVerdict> {
    let window = timeline.windows.get(index)?;
    let baselines = baselines_at(timeline, index);
    let none = Baseline::empty(Workload::of(window));
    let ctx = Ctx {
        window,
        index,
        baseline: baselines.for_window(window).unwrap_or(&none),
        // The cap as the recent windows show it, like the rolling baseline.
        admission_cap: super::resources::admission_cap(
            &timeline.windows[index.saturating_sub(ROLLING_WINDOWS)..=index],
        ),
    };
    Some(WindowVerdict {
        index,
        start_unix_ms: window.start_unix_ms,
        phase: window.phase.clone(),
        verdict: evaluate::verdict(rules::RULES, &ctx),
        hops: None,
        orchestration: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribute::Cause;
    use crate::collect::timeline::{NetSignals, ServerSignals, Window};

    /// A window seen from the server only: kernel first token and the server's KV usage.
    fn server_window(start: u64, first_token: f64, kv: f64, phase: Option<&str>) -> Window {
        Window {
            start_unix_ms: start,
            len_ms: 1000,
            phase: phase.map(str::to_owned),
            net: Some(NetSignals {
                exchanges: 8,
                server_first_token_p50_ms: Some(first_token),
                ..NetSignals::default()
            }),
            server: Some(ServerSignals {
                kv_usage: Some(kv),
                preemptions_per_s: Some(if kv >= 0.99 { 20.0 } else { 0.0 }),
                waiting: Some(0.0),
                running: Some(4.0),
                ..ServerSignals::default()
            }),
            ..Window::default()
        }
    }

    fn timeline(windows: Vec<Window>) -> Timeline {
        Timeline {
            origin_unix_ms: 0,
            len_ms: 1000,
            windows,
            marks: Vec::new(),
        }
    }

    #[test]
    fn a_marked_baseline_phase_wins_over_the_rolling_one() {
        let mut ws: Vec<Window> = (0..6)
            .map(|i| server_window(i * 1000, 30.0, 0.2, Some("baseline")))
            .collect();
        ws.extend((6..12).map(|i| server_window(i * 1000, 900.0, 1.0, Some("peak"))));
        let t = timeline(ws);
        let b = baselines_at(&t, 11);
        assert_eq!(b.0.len(), 1);
        assert_eq!(b.0[0].phase.as_deref(), Some("baseline"));
        assert_eq!(b.0[0].windows, (0..6).collect::<Vec<_>>());
        assert_eq!(verdict_at(&t, 11).unwrap().verdict.cause, Cause::KvCache);
        assert_eq!(verdict_at(&t, 3).unwrap().verdict.cause, Cause::None);
        assert!(verdict_at(&t, 12).is_none());
    }

    #[test]
    fn rolling_baseline_keeps_the_windows_at_or_below_the_running_median() {
        // Calm at 30-34 ms, then two slow windows: the slow ones never join the reference.
        let mut ws: Vec<Window> = (0..8)
            .map(|i| server_window(i * 1000, 30.0 + (i % 5) as f64, 0.2, None))
            .collect();
        ws.push(server_window(8000, 500.0, 0.3, None));
        ws.push(server_window(9000, 520.0, 0.3, None));
        let t = timeline(ws);
        let b = baselines_at(&t, 9);
        let base = &b.0[0];
        assert!(base.phase.is_none());
        assert!(base.windows.iter().all(|&i| i < 8), "{:?}", base.windows);
        let median = base.get(Signal::KernelFirstTokenP50Ms).unwrap();
        assert!(median < 35.0, "{median}");
        // The server's first token rose with no CPU, network or cache behind it: requests
        // waited inside the server (the kernel's queue signature), judged on the calm half.
        let v = verdict_at(&t, 9).unwrap().verdict;
        assert_eq!(
            (v.cause, v.signature.as_deref()),
            (Cause::Queue, Some("kernel")),
            "{v:#?}"
        );
        assert_eq!(verdict_at(&t, 5).unwrap().verdict.cause, Cause::None);
    }

    #[test]
    fn idle_windows_and_the_first_window_have_a_baseline() {
        let idle = Window {
            len_ms: 1000,
            ..Window::default()
        };
        let t = timeline(vec![idle.clone(), idle]);
        assert_eq!(baselines_at(&t, 0).0[0].windows, vec![0]);
        assert_eq!(baselines_at(&t, 1).0[0].windows, vec![0]);
        assert_eq!(verdict_at(&t, 1).unwrap().verdict.cause, Cause::None);
        assert!(baselines_at(&timeline(Vec::new()), 0).0.is_empty());
    }
}

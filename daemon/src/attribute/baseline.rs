//! The run's baselines: each signal's median and spread over the windows latency is compared
//! against, one baseline per kind of workload (LLM requests, vector searches, plain HTTP), so a
//! vector phase is never judged against an LLM phase.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::signals::{FIRST_TOKEN_WAKEUPS, Signal};
use crate::collect::timeline::{Timeline, Window};
use crate::measure::Endpoint;
use crate::quantile::exact::median;

/// Windows taken as the baseline when the time line has no phases.
pub const DEFAULT_BASELINE_WINDOWS: usize = 5;

/// How many robust standard deviations over its baseline median a value must be to count as a
/// rise (or fall): the noise band every relative test adds to its own ratio and least delta.
pub const NOISE_SIGMAS: f64 = 3.0;

/// What a window's requests were: baselines are kept per kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Workload {
    /// Chat or completions requests (or no load generator records: the server's side only).
    Llm,
    /// Vector searches.
    Vector,
    /// Plain HTTP requests.
    Http,
}

impl Workload {
    /// The workload of a window: the kind of most of its requests; LLM without records.
    #[must_use]
    pub fn of(w: &Window) -> Self {
        match w.load.as_ref().and_then(|l| l.endpoint) {
            Some(Endpoint::VectorSearch) => Workload::Vector,
            Some(Endpoint::Http) => Workload::Http,
            Some(Endpoint::Chat | Endpoint::Completions) | None => Workload::Llm,
        }
    }
}

/// One signal's baseline: median and robust spread (1.4826 x the median absolute deviation,
/// the standard deviation of normal noise).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Level {
    /// Median over the baseline windows.
    pub median: f64,
    /// Robust standard deviation over the baseline windows.
    pub spread: f64,
}

impl Level {
    /// The least value that rose off this level: `ratio` times it, `min_delta` over it, and
    /// beyond its noise band ([`NOISE_SIGMAS`] spreads).
    #[must_use]
    pub fn risen_bar(self, ratio: f64, min_delta: f64) -> f64 {
        (self.median * ratio)
            .max(self.median + min_delta)
            .max(self.median + NOISE_SIGMAS * self.spread)
    }
}

/// The "before" of one workload: each signal's level over its baseline windows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Baseline {
    /// The workload it serves.
    pub workload: Workload,
    /// Phase the baseline was taken from, if the time line has phases.
    pub phase: Option<String>,
    /// Indices of the baseline windows in the time line.
    pub windows: Vec<usize>,
    values: HashMap<Signal, Level>,
}

impl Baseline {
    /// The baseline of `workload`'s windows: a phase named `baseline` (or `*-baseline`,
    /// `baseline-*`), else the first phase, else the first [`DEFAULT_BASELINE_WINDOWS`]
    /// windows. `None` when the time line has no window of that workload.
    #[must_use]
    pub fn of(timeline: &Timeline, workload: Workload) -> Option<Self> {
        let ws = &timeline.windows;
        let mine: Vec<usize> = (0..ws.len())
            .filter(|&i| Workload::of(&ws[i]) == workload)
            .collect();
        if mine.is_empty() {
            return None;
        }
        let phases = || mine.iter().filter_map(|&i| ws[i].phase.as_deref());
        let phase = phases()
            .find(|p| is_baseline_name(p))
            .or_else(|| phases().next())
            .map(str::to_owned);
        let windows: Vec<usize> = match &phase {
            Some(p) => mine
                .into_iter()
                .filter(|&i| ws[i].phase.as_ref() == Some(p))
                .collect(),
            None => mine.into_iter().take(DEFAULT_BASELINE_WINDOWS).collect(),
        };
        Some(Self::from_windows(timeline, workload, phase, windows))
    }

    /// The baseline of `workload` over the given windows (indices into `timeline`), labelled
    /// with `phase`: for callers that choose the baseline windows themselves (the node
    /// daemon's rolling baseline, [`super::rolling`]).
    #[must_use]
    pub fn from_windows(
        timeline: &Timeline,
        workload: Workload,
        phase: Option<String>,
        windows: Vec<usize>,
    ) -> Self {
        let ws = &timeline.windows;
        let values = Signal::ALL
            .iter()
            .filter_map(|&s| {
                let vals: Vec<f64> = windows
                    .iter()
                    .filter_map(|&i| s.raw(ws.get(i)?, i))
                    .collect();
                level(&vals).map(|l| (s, l))
            })
            .collect();
        Self {
            workload,
            phase,
            windows,
            values,
        }
    }

    /// A baseline without windows: every relative test reads "no baseline".
    #[must_use]
    pub fn empty(workload: Workload) -> Self {
        Self {
            workload,
            phase: None,
            windows: Vec::new(),
            values: HashMap::new(),
        }
    }

    /// The baseline median of `signal`, when the baseline windows had it.
    #[must_use]
    pub fn get(&self, signal: Signal) -> Option<f64> {
        self.values.get(&signal).map(|l| l.median)
    }

    /// The baseline level (median and spread) of `signal`.
    #[must_use]
    pub fn level(&self, signal: Signal) -> Option<Level> {
        self.values.get(&signal).copied()
    }
}

/// A baseline per workload the time line has, LLM first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Baselines(pub Vec<Baseline>);

impl Baselines {
    /// The baselines of every workload in `timeline`.
    #[must_use]
    pub fn of(timeline: &Timeline) -> Self {
        Self(
            [Workload::Llm, Workload::Vector, Workload::Http]
                .into_iter()
                .filter_map(|k| Baseline::of(timeline, k))
                .collect(),
        )
    }

    /// The baseline `w` is judged against: its workload's.
    #[must_use]
    pub fn for_window(&self, w: &Window) -> Option<&Baseline> {
        let k = Workload::of(w);
        self.0.iter().find(|b| b.workload == k)
    }

    /// Whether window `index` is one of a baseline's own windows.
    #[must_use]
    pub fn contains(&self, index: usize) -> bool {
        self.0.iter().any(|b| b.windows.contains(&index))
    }
}

/// `baseline`, `llm-baseline`, `baseline_2`: a phase meant as the reference.
#[must_use]
pub fn is_baseline_name(name: &str) -> bool {
    name.split(['-', '_', ' ', '.'])
        .any(|part| part.eq_ignore_ascii_case("baseline"))
}

/// Median and robust spread of the finite values; `None` when there are none.
#[must_use]
pub fn level(values: &[f64]) -> Option<Level> {
    let mid = median(values)?;
    let deviations: Vec<f64> = values.iter().map(|v| (v - mid).abs()).collect();
    Some(Level {
        median: mid,
        spread: 1.4826 * median(&deviations).unwrap_or(0.0),
    })
}

/// What a rule evaluates a window with.
pub struct Ctx<'a> {
    /// The window.
    pub window: &'a Window,
    /// Its index in the time line.
    pub index: usize,
    /// The run's baseline.
    pub baseline: &'a Baseline,
    /// The server's slot cap: its own, else the ceiling its running count held while requests
    /// waited ([`super::resources::admission_cap`]).
    pub admission_cap: Option<f64>,
}

impl Signal {
    /// The signal's value in the context's window, using the baseline where it must.
    #[must_use]
    pub fn value(self, ctx: &Ctx<'_>) -> Option<f64> {
        match self {
            Signal::TtftRiseFromQueue => {
                let (w, b) = (ctx.window, ctx.baseline);
                let rise = |s: Signal| Some(s.raw(w, ctx.index)? - b.get(s)?);
                let ttft_rise = rise(Signal::ServerTtftMeanMs)?;
                let queue_rise = rise(Signal::QueueTimeMeanMs)?;
                // A TTFT that did not rise is not "explained" by anything.
                Some(if ttft_rise <= 1.0 {
                    0.0
                } else {
                    queue_rise / ttft_rise
                })
            }
            // Every joined request was hit: against the baseline's E2E instead of the others'.
            Signal::LossSlowdown => Signal::LossSlowdown.raw(ctx.window, ctx.index).or_else(|| {
                let n = ctx.window.net.as_ref()?;
                (n.loss_hit_requests > 0 && n.loss_clean_e2e_p50_ms.is_none()).then_some(())?;
                Some(n.loss_hit_e2e_max_ms? / ctx.baseline.get(Signal::E2eP50Ms)?.max(0.001))
            }),
            Signal::TransitShareOfRise => {
                let (w, b) = (ctx.window, ctx.baseline);
                let rise = |s: Signal| Some(s.raw(w, ctx.index)? - b.get(s)?);
                let gap = rise(Signal::ClientServerGapMs)?;
                let ttft = rise(Signal::TtftP50Ms)?;
                Some(if ttft <= 1.0 {
                    0.0
                } else {
                    (gap / ttft).clamp(0.0, 1.0)
                })
            }
            Signal::ServerWaitShare => {
                let (w, b) = (ctx.window, ctx.baseline);
                let rise = |s: Signal| Some(s.raw(w, ctx.index)? - b.get(s)?);
                let first = rise(Signal::KernelFirstTokenP50Ms)?;
                if first <= 1.0 {
                    return Some(0.0);
                }
                // Each wake-up on the first-token path waits the mean run-queue delay; CPU work
                // per request that grew adds its growth (both only when they rose).
                let sched = rise(Signal::RunqMeanUs)
                    .map_or(0.0, |us| us.max(0.0) * FIRST_TOKEN_WAKEUPS / 1000.0);
                let work = rise(Signal::ServerCpuPerRequestMs).unwrap_or(0.0).max(0.0);
                Some(((first - sched - work) / first).clamp(0.0, 1.0))
            }
            s => s.raw(ctx.window, ctx.index),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribute::signals::Source;
    use crate::collect::timeline::{LoadSignals, Quantiles};

    fn window(phase: &str, ttft_p50: f64, endpoint: Endpoint) -> Window {
        Window {
            phase: Some(phase.into()),
            len_ms: 1000,
            load: Some(LoadSignals {
                requests: 10,
                endpoint: Some(endpoint),
                ttft_ms: Some(Quantiles {
                    p50: ttft_p50,
                    p95: ttft_p50,
                    p99: ttft_p50,
                    max: 0.0,
                }),
                ..LoadSignals::default()
            }),
            ..Window::default()
        }
    }

    #[test]
    fn baseline_is_the_baseline_phase_median_and_spread() {
        let mut t = Timeline::new(0, 1000);
        t.windows = vec![
            window("warmup", 500.0, Endpoint::Chat),
            window("baseline", 100.0, Endpoint::Chat),
            window("baseline", 140.0, Endpoint::Chat),
            window("baseline", 120.0, Endpoint::Chat),
            window("peak", 900.0, Endpoint::Chat),
        ];
        let b = Baseline::of(&t, Workload::Llm).unwrap();
        assert_eq!(b.phase.as_deref(), Some("baseline"));
        assert_eq!(b.windows, [1, 2, 3]);
        assert_eq!(b.get(Signal::TtftP50Ms), Some(120.0));
        let l = b.level(Signal::TtftP50Ms).unwrap();
        assert!((l.spread - 1.4826 * 20.0).abs() < 1e-9, "{l:?}");
        assert_eq!(b.get(Signal::RunqP99Us), None);
        assert_eq!(
            Signal::RunqP99Us.absent_reason(&t.windows[0]),
            Source::Runq.absent_reason()
        );
    }

    #[test]
    fn each_workload_has_its_own_baseline_phase() {
        let mut t = Timeline::new(0, 1000);
        t.windows = vec![
            window("llm-baseline", 100.0, Endpoint::Chat),
            window("llm-peak", 900.0, Endpoint::Chat),
            window("vector-warm", 9.0, Endpoint::VectorSearch),
            window("vector-baseline", 4.0, Endpoint::VectorSearch),
            window("vector-chaos", 500.0, Endpoint::VectorSearch),
        ];
        let all = Baselines::of(&t);
        assert_eq!(all.0.len(), 2);
        let v = all.for_window(&t.windows[4]).unwrap();
        assert_eq!(v.phase.as_deref(), Some("vector-baseline"));
        assert_eq!(v.windows, [3]);
        let l = all.for_window(&t.windows[1]).unwrap();
        assert_eq!(l.phase.as_deref(), Some("llm-baseline"));
        assert!(all.contains(3) && !all.contains(4));
    }

    #[test]
    fn without_phases_the_first_windows_are_the_baseline() {
        let mut t = Timeline::new(0, 1000);
        t.windows = (0..8)
            .map(|i| Window {
                phase: None,
                ..window("x", f64::from(i), Endpoint::Chat)
            })
            .collect();
        let b = Baseline::of(&t, Workload::Llm).unwrap();
        assert_eq!(b.windows.len(), DEFAULT_BASELINE_WINDOWS);
        assert_eq!(b.get(Signal::TtftP50Ms), Some(2.0));
        assert_eq!(Signal::KvUsage.name(), "kv_usage");
    }
}

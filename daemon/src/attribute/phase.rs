//! Per-phase summaries: load achieved, latencies, the share of windows per verdict, the
//! dominant verdict, and where the TTFT increase over the baseline went.

use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::WindowVerdict;
use super::advice;
use super::baseline::{Baseline, Baselines};
use super::causes::{self, CausePart};
use super::confirm::{Confirmation, Outcome};
use super::decompose::{self, Decomposition, MEDIAN_BAND, TAIL_BAND};
use super::evaluate::{MEDIAN_RISE_MS, MEDIAN_RISE_RATIO};
use super::lag::Lag;
use super::missing;
use super::resources::Occupancy;
use super::signals::Signal;
use super::verdict::{Cause, CauseScore, Evidence};
use crate::collect::timeline::{Quantiles, Timeline, Window};
use crate::measure::ErrorClass;

/// Least share of a phase's windows for a cause to be its dominant verdict.
pub const DOMINANT_MIN_SHARE: f64 = 0.25;

/// Least windows of a cause for it to be a phase's verdict, by its share or by a risen tail
/// (fewer only in a phase shorter than that): one window is an anecdote. In a short phase (a
/// cooldown of four windows, two requests each) one send late by a hiccup is a quarter of it.
pub const MIN_CAUSE_WINDOWS: usize = 2;

/// What the load generator achieved in a phase.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PhaseLoad {
    /// Requests started.
    pub requests: u64,
    /// Of those, failed.
    pub errors: u64,
    /// Started requests per second over the phase.
    pub achieved_rps: f64,
    /// Mean intended rate, when open-loop.
    pub target_rps: Option<f64>,
    /// Mean output tokens per second.
    pub output_tokens_per_s: f64,
    /// Most requests in flight at once.
    pub in_flight_max: u64,
    /// Failed requests by class.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub error_classes: BTreeMap<ErrorClass, u64>,
    /// Arrivals the schedule asked for and the generator never sent (a phase that sent none).
    #[serde(default, skip_serializing_if = "crate::measure::report::is_zero")]
    pub unsent: u64,
}

/// Phase latencies, ms. Attribution fills them from the windows (each quantile the
/// request-weighted mean of the windows' quantile, `max` the largest window max); the load
/// generator's exact phase histograms replace them through `Report::set_phase_latency`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PhaseLatency {
    /// `true` when taken from the load generator's phase histograms, `false` when averaged
    /// from windows.
    #[serde(default)]
    pub exact: bool,
    /// Time to first token.
    pub ttft_ms: Option<Quantiles>,
    /// Inter-token latency.
    pub itl_ms: Option<Quantiles>,
    /// End to end.
    pub e2e_ms: Option<Quantiles>,
}

/// One verdict's share of a phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CauseShare {
    /// The verdict.
    pub cause: Cause,
    /// Windows with it.
    pub windows: usize,
    /// Share of the phase's windows, 0..1.
    pub share: f64,
}

/// Everything attribution says about one phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PhaseSummary {
    /// Phase name (`run` for windows without one).
    pub name: String,
    /// Start of the first window, Unix ms.
    pub start_unix_ms: u64,
    /// End of the last window, Unix ms.
    pub end_unix_ms: u64,
    /// Windows in the phase.
    pub windows: usize,
    /// Load achieved.
    pub load: PhaseLoad,
    /// Latencies.
    pub latency: PhaseLatency,
    /// Share of windows per verdict, largest first.
    pub shares: Vec<CauseShare>,
    /// The phase's verdict (see [`DOMINANT_MIN_SHARE`]).
    pub dominant: Cause,
    /// Mean confidence of the dominant verdict's windows.
    pub confidence: f64,
    /// Evidence of the dominant verdict's most confident window.
    pub evidence: Vec<Evidence>,
    /// The other causes that scored in the dominant verdict's windows, by mean rank over them
    /// (see [`super::causes::runners_up`]), best first.
    #[serde(default)]
    pub runners_up: Vec<CauseScore>,
    /// The causes named with their parts of the rise: the dominant one, and a second one when
    /// each explains at least [`super::causes::SECOND_CAUSE_MIN_PART`] of it (empty without a
    /// decomposition to read the parts from).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<CausePart>,
    /// What to do about the dominant verdict, in the terms of the engine the scrape recognised
    /// in the phase's windows (`attribute::advice`).
    pub hint: String,
    /// When the engine's compute saturated and requests also queued in this phase, the one
    /// whose windows came first (a saturated engine queues next): `compute` when its windows
    /// led, `queue` when requests waited before any step slowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub came_first: Option<Cause>,
    /// A percentile the reports show could be the lagging generator's requests' (`lag`).
    pub untrustworthy: bool,
    /// Where the load generator lagged, and what that can move.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag: Option<Lag>,
    /// Where the median latency's increase over the baseline went (absent for the baseline
    /// itself).
    pub decomposition: Option<Decomposition>,
    /// Where the tail's increase went: the requests ranked p90..p100, per request only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tail_decomposition: Option<Decomposition>,
    /// The verdict put to the test by a follow-up step (`stress --explain --confirm`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmation: Option<Confirmation>,
    /// Scenario events sent during the phase (e.g. `POST /v1/vector/rebuild -> 200 at +5.0 s`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub marks: Vec<String>,
    /// Evidence missing in this phase's windows, every signal by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
    /// The part of `missing` whose windows could have changed the phase's verdict, in words
    /// (`super::missing`): what the reports show.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing_decisive: Vec<String>,
    /// Which hop of the pipeline behind the target holds the rise (`--service`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hops: Option<super::hops::Hops>,
    /// The windows after the phase's last request was sent (its drain: requests still
    /// answering or waiting), summarised apart so they do not dilute the phase.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub drain: bool,
    /// A resource at its capacity with requests waiting for it in at least
    /// [`DOMINANT_MIN_SHARE`] of the phase's windows (`super::resources`), in words:
    /// `KV cache full (0.99), 1552 waiting`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saturated: Option<String>,
    /// More was asked than the server completed, or requests timed out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overload: Option<Overload>,
    /// What a reader must know before reading the verdict: a baseline that is no healthy
    /// reference, a comparison against one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The energy the server's GPUs used over the phase and its drain, per output token and
    /// per request (NVML's energy counter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy: Option<super::energy::PhaseEnergy>,
    /// A `compute` phase's step loop: bound by the host (the GPU waits for it) or by the GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound: Option<super::bound::Bound>,
    /// A phase replaying a Mooncake trace: the trace's prefix sharing beside the server's
    /// prefix-cache hit rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<super::prefix::PhasePrefix>,
}

/// A phase that asked more than the server completed: a finding, not a footnote.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Overload {
    /// Requests per second the phase asked for (its target, else what it sent).
    pub asked_rps: f64,
    /// Requests per second that succeeded, over the phase and its drain.
    pub completed_rps: f64,
    /// Requests that timed out.
    pub timed_out: u64,
    /// Requests sent.
    pub sent: u64,
    /// Where they waited, when the evidence says (`in the server's queue: KV cache full ...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waited: Option<String>,
}

impl Overload {
    /// One line: `asked 80 req/s, completed 14.2 req/s, 1711 of 2400 timed out waiting in ...`.
    #[must_use]
    pub fn line(&self) -> String {
        let mut s = format!(
            "overload: asked {:.1} req/s, the server completed {:.1} req/s",
            self.asked_rps, self.completed_rps
        );
        if self.timed_out > 0 {
            let _ = write!(s, ", {} of {} timed out waiting", self.timed_out, self.sent);
        }
        if let Some(w) = &self.waited {
            let _ = write!(s, " ({w})");
        }
        s
    }
}

/// Completed below this share of the asked rate is overload.
pub const OVERLOAD_COMPLETED_SHARE: f64 = 0.8;

impl PhaseSummary {
    /// Records `c` and updates the phase's score: a confirmed verdict closes half its distance
    /// to 1; one not confirmed is halved, never below its best runner-up (the ranking stands, the
    /// report says it was not confirmed).
    pub fn confirm(&mut self, c: Confirmation) {
        let score = self.confidence;
        self.confidence = match c.outcome {
            Outcome::Confirmed => score + (1.0 - score) / 2.0,
            Outcome::NotConfirmed => {
                let runner_up = self.runners_up.first().map_or(0.0, |r| r.confidence);
                (score / 2.0).max(runner_up).min(score)
            }
            Outcome::CannotByLoad => score,
        };
        self.confirmation = Some(c);
    }

    /// The verdict in words: the dominant cause, or the two causes it names with their parts of
    /// the rise (`kv_cache (62%) + network (31%)`).
    #[must_use]
    pub fn verdict_name(&self) -> String {
        if self.causes.len() > 1 {
            self.causes
                .iter()
                .map(|c| format!("{} ({:.0}%)", c.cause, c.part * 100.0))
                .collect::<Vec<_>>()
                .join(" + ")
        } else {
            self.dominant.to_string()
        }
    }
}

/// Summarises each phase, in order of first appearance; a phase's drain (see
/// [`split_drain`]) follows it as a summary of its own. `admission_cap` is the server's slot
/// cap (`super::resources::admission_cap`).
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
                p.bound = super::bound::Bound::of(&ws);
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
        p.energy = super::energy::PhaseEnergy::of(&all);
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

/// The resource the phase's requests waited for, when the resource model found one full with
/// requests waiting in at least [`DOMINANT_MIN_SHARE`] of its windows (and two): the window with
/// the most waiting, in words.
fn saturated(idx: &[usize], windows: &[Window], cap: Option<f64>) -> Option<String> {
    let found: Vec<Occupancy> = idx
        .iter()
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
/// workload says what that means for its comparison.
fn note_saturated_baselines(phases: &mut [PhaseSummary]) {
    let saturated_baseline = phases
        .iter()
        .find(|p| !p.drain && super::baseline::is_baseline_name(&p.name) && p.saturated.is_some())
        .map(|p| (p.name.clone(), p.saturated.clone().unwrap_or_default()));
    let Some((name, what)) = saturated_baseline else {
        return;
    };
    for p in phases.iter_mut() {
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

/// The phase's overload line: when requests timed out, or the server completed less than
/// [`OVERLOAD_COMPLETED_SHARE`] of the rate asked. `all` holds the phase's windows with its
/// drain (completions count until the last answer).
fn overload(p: &PhaseSummary, all: &[&Window]) -> Option<Overload> {
    let timed_out = p
        .load
        .error_classes
        .get(&ErrorClass::Timeout)
        .copied()
        .unwrap_or(0);
    let sending_s: f64 = (p.end_unix_ms.saturating_sub(p.start_unix_ms)) as f64 / 1000.0;
    let all_s: f64 = all.iter().map(|w| w.len_ms as f64 / 1000.0).sum();
    if sending_s <= 0.0 || all_s <= 0.0 || p.load.requests == 0 {
        return None;
    }
    let asked_rps = p
        .load
        .target_rps
        .unwrap_or(p.load.requests as f64 / sending_s);
    let ok = p.load.requests.saturating_sub(p.load.errors);
    // What the server could complete: the successes over the time they had, the phase and
    // what it drained; never more than asked when everything succeeded.
    let completed_rps = ok as f64 / all_s.max(sending_s);
    let short = completed_rps < OVERLOAD_COMPLETED_SHARE * asked_rps && ok < p.load.requests;
    if timed_out == 0 && !short {
        return None;
    }
    let waited = p
        .saturated
        .as_ref()
        .map(|s| format!("in the server's queue: {s}"))
        .or_else(|| {
            (p.dominant == Cause::Queue)
                .then(|| "inside the server, before its first byte".to_owned())
        });
    Some(Overload {
        asked_rps,
        completed_rps,
        timed_out,
        sent: p.load.requests,
        waited,
    })
}

/// By how many windows `dominant` won over the next cause (all of them when it named none).
fn margin(shares: &[CauseShare], dominant: Cause) -> usize {
    let windows = |mine: bool| {
        shares
            .iter()
            .filter(|s| (s.cause == dominant) == mine)
            .map(|s| s.windows)
            .max()
            .unwrap_or(0)
    };
    windows(true).saturating_sub(windows(false))
}

fn phase_name(w: &Window) -> String {
    w.phase.clone().unwrap_or_else(|| "run".to_owned())
}

/// One phase (`drain`: the windows after its last send) of the windows `idx`.
fn summarise_one(
    name: String,
    idx: &[usize],
    drain: bool,
    windows: &[Window],
    verdicts: &[WindowVerdict],
    baselines: &Baselines,
    admission_cap: Option<f64>,
) -> PhaseSummary {
    let n = idx.len();
    let mut shares: Vec<CauseShare> = Cause::ALL
        .iter()
        .map(|&cause| {
            let k = idx
                .iter()
                .filter(|&&i| verdicts[i].verdict.cause == cause)
                .count();
            CauseShare {
                cause,
                windows: k,
                share: k as f64 / n.max(1) as f64,
            }
        })
        .filter(|s| s.windows > 0)
        .collect();
    shares.sort_by_key(|s| std::cmp::Reverse(s.windows));
    let phase_windows: Vec<&Window> = idx.iter().map(|&i| &windows[i]).collect();
    let phase_latency = latency(&phase_windows);
    let is_baseline = idx.iter().all(|&i| baselines.contains(i));
    let base = idx.first().and_then(|&i| baselines.for_window(&windows[i]));
    let dominant = dominant(&shares, is_baseline, base, &phase_latency);
    let of_dominant: Vec<&WindowVerdict> = idx
        .iter()
        .map(|&i| &verdicts[i])
        .filter(|v| v.verdict.cause == dominant)
        .collect();
    let confidence = mean_confidence(&of_dominant);
    // The evidence of the most confident window.
    let evidence = of_dominant
        .iter()
        .max_by(|a, b| a.verdict.confidence.total_cmp(&b.verdict.confidence))
        .map(|v| v.verdict.evidence.clone())
        .unwrap_or_default();
    let runners_up = causes::runners_up(&of_dominant);
    let missing = missing::groups(idx.iter().flat_map(|&i| verdicts[i].verdict.missing.iter()));
    let by_design = missing::ByDesign {
        recognised_engine: phase_windows
            .iter()
            .any(|w| w.server.as_ref().is_some_and(|s| !s.engine.is_unknown())),
        drain,
    };
    let missing_decisive = missing::decisive(&missing, n, margin(&shares, dominant), by_design);
    let missing: Vec<String> = missing.iter().map(|g| g.line(n)).collect();
    let (came_first, hint) = onset(dominant, idx, windows, verdicts, admission_cap);
    let lag = Lag::of(idx, windows, verdicts);
    let untrustworthy = lag.as_ref().is_some_and(Lag::untrustworthy);
    let (decomposition, tail_decomposition) = base
        .filter(|_| !is_baseline)
        .map(|base| decompositions(idx, windows, base))
        .unwrap_or_default();
    let won: Vec<Cause> = shares.iter().map(|s| s.cause).collect();
    let named = causes::named(
        dominant,
        &causes::candidates(dominant, &runners_up, &won),
        &[decomposition.as_ref(), tail_decomposition.as_ref()],
    );
    PhaseSummary {
        start_unix_ms: phase_windows.first().map_or(0, |w| w.start_unix_ms),
        end_unix_ms: phase_windows
            .last()
            .map_or(0, |w| w.start_unix_ms + w.len_ms),
        windows: n,
        load: load(&phase_windows),
        latency: phase_latency,
        shares,
        dominant,
        confidence,
        evidence,
        hint,
        came_first,
        untrustworthy,
        lag,
        causes: named,
        runners_up,
        decomposition,
        tail_decomposition,
        missing,
        missing_decisive,
        marks: Vec::new(),
        confirmation: None,
        hops: None,
        drain,
        saturated: None,
        overload: None,
        notes: Vec::new(),
        energy: None,
        bound: None,
        prefix: None,
        name,
    }
}

/// Where the median's and the tail's rise over `base` went: per request when the windows carry
/// their requests, the median from window medians otherwise.
fn decompositions(
    idx: &[usize],
    windows: &[Window],
    base: &Baseline,
) -> (Option<Decomposition>, Option<Decomposition>) {
    (
        decompose::by_requests(idx, windows, base, "p50", MEDIAN_BAND)
            .or_else(|| decompose::by_windows(idx, windows, base)),
        decompose::by_requests(idx, windows, base, "p95", TAIL_BAND),
    )
}

/// The mean confidence of `verdicts` (0 when there are none).
fn mean_confidence(verdicts: &[&WindowVerdict]) -> f64 {
    if verdicts.is_empty() {
        return 0.0;
    }
    verdicts.iter().map(|v| v.verdict.confidence).sum::<f64>() / verdicts.len() as f64
}

/// Which of `compute` and `queue` came first in the phase's windows, when both did (each in at
/// least [`MIN_CAUSE_WINDOWS`] windows), and the hint of the `dominant` cause for the engine the
/// windows' scrapes recognised, led by the order in words when it is one of them: `compute
/// saturated first (+2 s), requests queued from +5 s`.
fn onset(
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
    let advice = advice::hint(
        dominant,
        advice::engine_of(idx.iter().map(|&i| &windows[i])),
        &advice::Headroom::of(&occupancies),
    );
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

/// The phase's verdict from its windows' `shares` (most windows first). A lagging generator
/// makes every other verdict of the phase suspect, so it leads; a named cause comes before
/// `unexplained`, which comes before `none`. A cause of fewer windows still explains the phase
/// when the phase's tail rose: a spike of a few windows (a rebuild, a burst of loss) is what a
/// phase's p99 shows and a window share hides.
fn dominant(
    shares: &[CauseShare],
    is_baseline: bool,
    base: Option<&Baseline>,
    phase_latency: &PhaseLatency,
) -> Cause {
    let named = |c: Cause| !matches!(c, Cause::None | Cause::Unexplained);
    let least = MIN_CAUSE_WINDOWS.min(shares.iter().map(|s| s.windows).sum());
    // The causes of enough of the phase's windows, most windows first.
    let holding: Vec<Cause> = shares
        .iter()
        .filter(|s| s.share >= DOMINANT_MIN_SHARE && s.windows >= least)
        .map(|s| s.cause)
        .collect();
    if holding.contains(&Cause::Loadgen) {
        return Cause::Loadgen;
    }
    holding
        .iter()
        .copied()
        .find(|&c| named(c))
        .or_else(|| {
            // Not in a baseline phase: it is the reference its own tail is judged by.
            shares
                .iter()
                .find(|s| named(s.cause))
                .filter(|s| s.windows >= MIN_CAUSE_WINDOWS)
                .filter(|_| !is_baseline && base.is_some_and(|b| tail_rose(phase_latency, b)))
                .map(|s| s.cause)
        })
        .or_else(|| {
            // Windows of a request or two rise by chance on a machine whose speed drifts:
            // the phase's rise is unexplained only when the phase as a whole rose. The
            // baseline phase is the reference those rises are measured from: its own windows
            // above its median are its noise (a few exchanges a window make a bimodal median),
            // never a rise; a baseline that is itself the problem is named by what is full.
            (holding.contains(&Cause::Unexplained)
                && base.is_none_or(|b| !is_baseline && rose(phase_latency, b)))
            .then_some(Cause::Unexplained)
        })
        .unwrap_or(Cause::None)
}

/// Whether the phase's p99 (TTFT, else E2E; request-weighted over its windows) is at least
/// twice the baseline windows' median p99 and beyond their noise.
fn tail_rose(latency: &PhaseLatency, base: &Baseline) -> bool {
    let check = |q: Option<Quantiles>, s: Signal| {
        let (q, level) = (q?, base.level(s)?);
        Some(q.p99 >= level.risen_bar(2.0, 0.0))
    };
    check(latency.ttft_ms, Signal::TtftP99Ms)
        .or_else(|| check(latency.e2e_ms, Signal::E2eP99Ms))
        .unwrap_or(false)
}

/// Whether the phase's latency rose as a window's must to be off its baseline: its TTFT or
/// E2E median x1.5 and +20 ms beyond the baseline's noise, or its tail ([`tail_rose`]). A
/// phase without client latencies (the server's side only) cannot say, and counts as risen.
fn rose(latency: &PhaseLatency, base: &Baseline) -> bool {
    let check = |q: Option<Quantiles>, s: Signal| {
        let (q, level) = (q?, base.level(s)?);
        Some(q.p50 >= level.risen_bar(MEDIAN_RISE_RATIO, MEDIAN_RISE_MS))
    };
    let medians = [
        check(latency.ttft_ms, Signal::TtftP50Ms),
        check(latency.e2e_ms, Signal::E2eP50Ms),
    ];
    medians.iter().all(Option::is_none) || medians.contains(&Some(true)) || tail_rose(latency, base)
}

/// Groups the `signal: reason` lines of a phase's `windows` windows by reason and by how many
/// windows lacked the signal: `reason: signal, signal`, with `(in k of n windows)` when not all.
fn load(ws: &[&Window]) -> PhaseLoad {
    let loads: Vec<_> = ws.iter().filter_map(|w| w.load.as_ref()).collect();
    let secs: f64 = ws.iter().map(|w| w.len_ms as f64 / 1000.0).sum();
    let targets: Vec<f64> = loads.iter().filter_map(|l| l.target_rps).collect();
    let requests = loads.iter().map(|l| l.requests).sum();
    PhaseLoad {
        requests,
        errors: loads.iter().map(|l| l.errors).sum(),
        achieved_rps: if secs > 0.0 {
            requests as f64 / secs
        } else {
            0.0
        },
        target_rps: (!targets.is_empty())
            .then(|| targets.iter().sum::<f64>() / targets.len() as f64),
        output_tokens_per_s: if loads.is_empty() {
            0.0
        } else {
            loads.iter().map(|l| l.output_tokens_per_s).sum::<f64>() / loads.len() as f64
        },
        in_flight_max: loads.iter().map(|l| l.in_flight_max).max().unwrap_or(0),
        unsent: loads.iter().filter_map(|l| l.unsent).sum(),
        error_classes: loads.iter().flat_map(|l| l.error_classes.iter()).fold(
            BTreeMap::new(),
            |mut m, (c, n)| {
                *m.entry(*c).or_default() += n;
                m
            },
        ),
    }
}

fn latency(ws: &[&Window]) -> PhaseLatency {
    let merge = |get: fn(&crate::collect::timeline::LoadSignals) -> Option<Quantiles>| {
        let parts: Vec<(f64, Quantiles)> = ws
            .iter()
            .filter_map(|w| w.load.as_ref())
            .filter_map(|l| get(l).map(|q| ((l.requests.max(1)) as f64, q)))
            .collect();
        let total: f64 = parts.iter().map(|(n, _)| n).sum();
        (total > 0.0).then(|| {
            let mean =
                |f: fn(&Quantiles) -> f64| parts.iter().map(|(n, q)| n * f(q)).sum::<f64>() / total;
            Quantiles {
                p50: mean(|q| q.p50),
                p95: mean(|q| q.p95),
                p99: mean(|q| q.p99),
                max: parts.iter().map(|(_, q)| q.max).fold(0.0, f64::max),
            }
        })
    };
    PhaseLatency {
        exact: false,
        ttft_ms: merge(|l| l.ttft_ms),
        itl_ms: merge(|l| l.itl_ms),
        e2e_ms: merge(|l| l.e2e_ms),
    }
}

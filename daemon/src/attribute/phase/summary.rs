//! What attribution says about a phase: the load achieved, its latencies, the share of windows
//! per verdict, the dominant verdict with its evidence, and an overload when there was one.

use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::attribute::causes::CausePart;
use crate::attribute::confirm::{Confirmation, Outcome};
use crate::attribute::decompose::Decomposition;
use crate::attribute::lag::Lag;
use crate::attribute::verdict::{Cause, CauseScore, Evidence};
use crate::collect::timeline::Quantiles;
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
    /// (see [`crate::attribute::causes::runners_up`]), best first.
    #[serde(default)]
    pub runners_up: Vec<CauseScore>,
    /// The causes named with their parts of the rise: the dominant one, and a second one when
    /// each explains at least [`crate::attribute::causes::SECOND_CAUSE_MIN_PART`] of it
    /// (empty without a decomposition to read the parts from).
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
    /// (`attribute::missing`): what the reports show.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing_decisive: Vec<String>,
    /// Which hop of the pipeline behind the target holds the rise (`--service`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hops: Option<crate::attribute::hops::Hops>,
    /// The windows after the phase's last request was sent (its drain: requests still
    /// answering or waiting), summarised apart so they do not dilute the phase.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub drain: bool,
    /// A resource at its capacity with requests waiting for it in at least
    /// [`DOMINANT_MIN_SHARE`] of the phase's windows (`attribute::resources`), in words:
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
    pub energy: Option<crate::attribute::energy::PhaseEnergy>,
    /// A `compute` phase's step loop: bound by the host (the GPU waits for it) or by the GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound: Option<crate::attribute::bound::Bound>,
    /// A phase replaying a Mooncake trace: the trace's prefix sharing beside the server's
    /// prefix-cache hit rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<crate::attribute::prefix::PhasePrefix>,
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

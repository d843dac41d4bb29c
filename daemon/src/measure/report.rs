//! The run report: aggregates per phase (with mergeable histograms), SLO results and
//! the per-request records. Its JSON form is versioned; see `docs/stress.md`.

use std::{collections::BTreeMap, path::Path};

use serde::{Deserialize, Serialize};

use super::{
    metrics::{Hist, PhaseMetrics},
    record::{ErrorClass, RequestRecord},
    shard::Shard,
    slo::SloResult,
    summary::{Summary, encode_hist},
    vector_health::{VectorView, window_for},
};

/// `schema` field of every report.
pub const SCHEMA: &str = "inferscope.stress.report";
/// Current report version; bumped on any incompatible change.
pub const VERSION: u32 = 1;

/// Counters of a phase.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Counts {
    /// Requests the schedule asked for (open loop) or started (closed loop).
    pub scheduled: u64,
    /// Dropped because a cap was hit (`when_capped: drop`), or held by a cap (`wait`) past the
    /// phase's end and never sent.
    pub dropped: u64,
    /// Finished, ok or not.
    pub finished: u64,
    /// Succeeded.
    pub ok: u64,
    /// Succeeded and met every per-request SLO.
    pub good: u64,
    /// Failures by class (`connect`, `timeout`, `http_status`, ...).
    pub errors: BTreeMap<String, u64>,
    /// Requests sent a second time on a fresh connection because the server had closed the
    /// kept-alive one before answering (not errors: see `client::HttpClient::send`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reconnected: u64,
    /// Finished requests a chaos knob shaped, by knob (`max_tokens_one`, `abort_mid_stream`,
    /// `oversize_prompt`): counted apart so that their share can be checked against the
    /// scenario's (they are among `finished` too).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub chaos: BTreeMap<String, u64>,
}

/// One phase of the report.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct PhaseReport {
    /// Phase name.
    pub name: String,
    /// Label `scenario` (baseline, soak, burst...).
    pub label: String,
    /// Label `endpoint`.
    pub endpoint: String,
    /// Label `load_level` (`rate=20/s`, `concurrency=32`).
    pub load_level: String,
    /// Mean target rate (open loop).
    pub target_rate: Option<f64>,
    /// Configured duration, seconds.
    pub duration_s: f64,
    /// Time actually spent sending (shorter when interrupted), seconds.
    pub elapsed_s: f64,
    /// Counters.
    pub counts: Counts,
    /// Failed / finished (intentional chaos aborts excluded).
    pub error_rate: f64,
    /// Finished requests per second.
    pub requests_per_s: f64,
    /// Good requests per second (goodput).
    pub goodput_per_s: f64,
    /// Output tokens of all requests.
    pub output_tokens: u64,
    /// Output tokens per second.
    pub output_tokens_per_s: f64,
    /// Prompt tokens (from usage).
    pub input_tokens: u64,
    /// Input plus output tokens per second (token QPS).
    #[serde(default)]
    pub tokens_per_s: f64,
    /// Tasks that ended (single requests; conversations that completed or failed).
    #[serde(default)]
    pub tasks: u64,
    /// Tasks that succeeded (no error, every answer passed `check:`).
    #[serde(default)]
    pub tasks_succeeded: u64,
    /// Semantic throughput: succeeded tasks per second (sTPS).
    #[serde(default)]
    pub semantic_tasks_per_s: f64,
    /// Inference consistency entropy per conversation (nats; conversations with logprobs).
    #[serde(default)]
    pub ice: Summary,
    /// Retries, outages and the MSR (phases with a retry policy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resilience: Option<super::resilience::Resilience>,
    /// Latency summaries in milliseconds: ttft, itl, tpot, e2e (from intended start),
    /// `e2e_from_send` (uncorrected, for comparison), `send_lag`.
    pub latency_ms: BTreeMap<String, Summary>,
    /// Per-stream decode rate, tokens/s.
    pub stream_tokens_per_s: Summary,
    /// recall@k of sampled vector queries (fraction).
    pub recall: Summary,
    /// Base64 `HdrHistogram` V2 of each series (latencies in µs; `stream_tokens_per_s` in
    /// tokens/s x 1000; `recall` in recall x 10000 + 1). Merge these, not the summaries.
    pub histograms: BTreeMap<String, String>,
    /// SLO outcomes.
    pub slo: Vec<SloResult>,
    /// Vector search: recall and latency together, and index health (`vector/health.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vector: Option<VectorView>,
    /// Client-orchestrated pipeline tasks (`request.pipeline`): each step's latency, share of
    /// E2E and fallbacks, the final chat's TTFT and the tool-call depth (`pipeline.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<super::pipeline::PipelineView>,
    /// Agentic sessions (`request.session`): per session its E2E, turns, tokens and where
    /// its time went (model, tools, think, client); per call depth its TTFT, ITL and context
    /// length; each session (`session.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<super::session::SessionsView>,
    /// The span where the phase's load held, and its latencies there (`steady.rs`); absent
    /// without records, or when no second of it held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steady: Option<super::steady::SteadyState>,
    /// A closed-loop phase whose users started over a ramp (`ramp_up:`, or the default of
    /// large user counts): the ramp, and the requests started during it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ramp: Option<RampView>,
    /// A phase replaying a Mooncake trace: how much of its prompt text repeats leading blocks
    /// an earlier request of the replay sent (an infinite prefix cache's hit rate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<super::prefix::PrefixSharing>,
}

/// The ramp-up of a closed-loop phase in its report.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct RampView {
    /// Seconds from the phase's start until its last user started.
    pub ramp_up_s: f64,
    /// How the users' starts were spread: `linear` or `exponential`.
    pub strategy: String,
    /// The scenario set no `ramp_up`: this is the default of large user counts.
    pub default: bool,
    /// Whether the requests started during the ramp are in the phase's percentiles
    /// (`ramp_up: {count: true}`); otherwise they are only here.
    pub counted: bool,
    /// Requests started during the ramp and left out of the phase's percentiles (0 when
    /// `counted`).
    pub requests: u64,
    /// Their TTFT, ms.
    pub ttft_ms: Summary,
    /// Their E2E, ms.
    pub e2e_ms: Summary,
    /// Their TTFT and E2E histograms (µs, encoded as the phase's `histograms`), so that
    /// `report merge` adds the shards' ramps.
    #[serde(default)]
    pub histograms: BTreeMap<String, String>,
}

impl RampView {
    /// The view of a ramp of `ramp_up_s` spread by `strategy`, and of the requests `m` kept
    /// apart during it.
    #[must_use]
    pub fn new(
        ramp_up_s: f64,
        strategy: &str,
        default: bool,
        counted: bool,
        m: &PhaseMetrics,
    ) -> Self {
        let (ttft_ms, e2e_ms) = m.ramp.summaries();
        Self {
            ramp_up_s,
            strategy: strategy.to_owned(),
            default,
            counted,
            requests: m.ramp.finished,
            ttft_ms,
            e2e_ms,
            histograms: BTreeMap::from([
                ("ttft".to_owned(), encode_hist(&m.ramp.ttft)),
                ("e2e".to_owned(), encode_hist(&m.ramp.e2e)),
            ]),
        }
    }
}

/// A one-off request made by a phase's `events:`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct EventRecord {
    /// Phase index.
    pub phase: u32,
    /// `METHOD path`.
    pub request: String,
    /// Sent at (µs since run start).
    pub at_us: u64,
    /// Finished at (µs since run start).
    pub end_us: u64,
    /// HTTP status or error text.
    pub outcome: String,
}

/// The whole run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct StressReport {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// [`VERSION`].
    pub version: u32,
    /// Scenario name.
    pub scenario: String,
    /// Target base URL.
    pub target: String,
    /// The share of the load this run produced (`--shard i/N`); absent for the whole load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<Shard>,
    /// Run start, Unix time in ns (record times are offsets from it).
    pub started_unix_ns: u64,
    /// Run start on `CLOCK_MONOTONIC` in ns (the clock of eBPF's `bpf_ktime_get_ns`).
    pub started_monotonic_ns: u64,
    /// Wall time of the whole run, seconds.
    pub elapsed_s: f64,
    /// Why the run stopped early (Ctrl-C, error-rate abort, an internal failure), if it did.
    pub stopped: Option<Stop>,
    /// Every SLO of every phase held.
    pub slo_pass: bool,
    /// Phases in run order.
    pub phases: Vec<PhaseReport>,
    /// Requests made by `events:`.
    pub events: Vec<EventRecord>,
    /// Every request (empty when records were not kept), up to the records' memory budget.
    pub records: Vec<RequestRecord>,
    /// Records left out of `records` once the budget was spent (`Options::records_budget`);
    /// the phases' metrics still count them.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub records_overflow: u64,
    /// What the run ran against and on: the engine and its version, the GPUs, CPU and kernel,
    /// the scenario's hash, the seed and the trace id (`provenance.rs`). A merged report keeps
    /// the first shard's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<super::provenance::Provenance>,
}

/// Whether the SLO gate passes on `phases`: every SLO of every phase held, on enough samples.
#[must_use]
pub fn slo_pass(phases: &[PhaseReport]) -> bool {
    phases
        .iter()
        .all(|p| p.slo.iter().all(SloResult::gate_passes))
}

/// For `skip_serializing_if`: a counter that stayed at zero.
#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
pub(crate) fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Static facts of a phase needed for its report.
pub struct PhaseInfo {
    /// Name.
    pub name: String,
    /// Label.
    pub label: String,
    /// Endpoint label.
    pub endpoint: String,
    /// Load level label.
    pub load_level: String,
    /// Mean target rate.
    pub target_rate: Option<f64>,
    /// Configured duration, s.
    pub duration_s: f64,
    /// Actual sending time, s.
    pub elapsed_s: f64,
    /// SLOs.
    pub slos: Vec<super::slo::Slo>,
    /// `T_max` (ms) of the phase's retry policy; `None` without one (or after a merge:
    /// shards' outages do not add up).
    pub retry_t_max_ms: Option<f64>,
    /// Vector phases: what the joint view needs.
    pub vector: Option<VectorInfo>,
    /// A replayed Mooncake trace's prefix sharing.
    pub prefix: Option<super::prefix::PrefixSharing>,
}

/// The vector facts of a phase for its report.
#[derive(Debug, Clone)]
pub struct VectorInfo {
    /// `ef_search` sent.
    pub ef_search: Option<u32>,
    /// The phase a sweep step was made from.
    pub sweep_of: Option<String>,
    /// Threshold of the low-recall set.
    pub low_recall: f64,
    /// Threshold of the rebuild advice.
    pub rebuild_below: f64,
}

impl PhaseReport {
    /// Builds the report of one phase and checks its SLOs.
    #[must_use]
    pub fn build(info: &PhaseInfo, m: &PhaseMetrics) -> Self {
        let el = info.elapsed_s.max(1e-9);
        let slo = info
            .slos
            .iter()
            .map(|s| SloResult::new(s, m.value(s.metric, el), m.samples(s.metric)))
            .collect();
        let errors = ErrorClass::ALL
            .iter()
            .filter_map(|c| m.errors.get(c).map(|n| (c.name().to_string(), *n)))
            .collect();
        PhaseReport {
            name: info.name.clone(),
            label: info.label.clone(),
            endpoint: info.endpoint.clone(),
            load_level: info.load_level.clone(),
            target_rate: info.target_rate,
            duration_s: info.duration_s,
            elapsed_s: info.elapsed_s,
            counts: Counts {
                scheduled: m.scheduled,
                dropped: m.dropped,
                finished: m.finished,
                ok: m.ok,
                good: m.good,
                errors,
                reconnected: m.reconnected,
                chaos: super::record::Chaos::ALL
                    .iter()
                    .filter_map(|c| m.chaos.get(c).map(|n| (c.name().to_string(), *n)))
                    .collect(),
            },
            error_rate: m.error_rate(),
            requests_per_s: m.finished as f64 / el,
            goodput_per_s: m.good as f64 / el,
            output_tokens: m.output_tokens,
            output_tokens_per_s: m.output_tokens as f64 / el,
            tokens_per_s: (m.input_tokens + m.output_tokens) as f64 / el,
            tasks: m.tasks,
            tasks_succeeded: m.tasks_ok,
            semantic_tasks_per_s: m.tasks_ok as f64 / el,
            ice: m.summary(Hist::Ice),
            resilience: info.retry_t_max_ms.map(|t| m.resilience.finish(t)),
            input_tokens: m.input_tokens,
            latency_ms: [
                Hist::Ttft,
                Hist::Itl,
                Hist::Tpot,
                Hist::E2e,
                Hist::E2eFromSend,
                Hist::SendLag,
            ]
            .into_iter()
            .map(|h| (h.name().to_string(), m.summary(h)))
            // Per-turn TTFT only for conversations; connect times only where connections opened.
            .chain(
                [Hist::TtftFirstTurn, Hist::TtftLaterTurns, Hist::Connect]
                    .into_iter()
                    .map(|h| (h.name().to_string(), m.summary(h)))
                    .filter(|(_, s)| s.count > 0),
            )
            .collect(),
            stream_tokens_per_s: m.summary(Hist::StreamTokensPerS),
            recall: m.summary(Hist::Recall),
            vector: info
                .vector
                .as_ref()
                .map(|v| vector_view(v, m, info.duration_s)),
            pipeline: m.pipeline.view(),
            sessions: m.sessions.view(),
            // The ramp's length and the steady state (from the records) are the engine's to
            // say.
            ramp: None,
            prefix: info.prefix.clone(),
            steady: None,
            histograms: Hist::ALL
                .into_iter()
                .map(|h| (h.name().to_string(), encode_hist(&m[h])))
                .collect(),
            slo,
        }
    }
}

/// The joint view and index health of a vector phase.
fn vector_view(v: &VectorInfo, m: &PhaseMetrics, duration_s: f64) -> VectorView {
    let e2e = m.summary(Hist::E2e);
    let edges = [
        ("p50", e2e.p50),
        ("p90", e2e.p90),
        ("p99", e2e.p99),
        ("p999", e2e.p999),
    ];
    let (spikes, median) = m.vector.spikes();
    VectorView {
        spikes,
        e2e_median_second_ms: median,
        ef_search: v.ef_search,
        sweep_of: v.sweep_of.clone(),
        joint: m.vector.joint(edges, v.low_recall),
        health: m.vector.health(window_for(duration_s), v.rebuild_below),
    }
}

impl StressReport {
    /// Writes the JSON report (pretty-printed) to `path`.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        // Complete or absent: a temporary file beside it, flushed, synced and renamed.
        crate::atomic::write_atomic(path, |w| {
            serde_json::to_writer(w, self).map_err(std::io::Error::other)
        })
    }
}

/// Why a run stopped before its phases ended. In the report it is one line, `KIND: why`
/// (`aborted: error rate ...`), which reads back into the same value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(try_from = "String", into = "String")]
pub struct Stop {
    /// What stopped it: decides the exit status.
    pub kind: StopKind,
    /// The details, for a person.
    pub why: String,
}

/// What stopped a run early.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum StopKind {
    /// A signal, or the caller's cancellation.
    Interrupted,
    /// The error rate rose above `abort_error_rate`.
    Aborted,
    /// The load generator itself failed (a panic while sending).
    Failed,
}

impl StopKind {
    const ALL: [Self; 3] = [Self::Interrupted, Self::Aborted, Self::Failed];

    fn name(self) -> &'static str {
        match self {
            Self::Interrupted => "interrupted",
            Self::Aborted => "aborted",
            Self::Failed => "failed",
        }
    }
}

impl Stop {
    /// A stop of `kind` with its details.
    pub fn new(kind: StopKind, why: impl Into<String>) -> Self {
        Self {
            kind,
            why: why.into(),
        }
    }
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind.name(), self.why)
    }
}

impl std::str::FromStr for Stop {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (kind, why) = s.split_once(": ").unwrap_or((s, ""));
        StopKind::ALL
            .into_iter()
            .find(|k| k.name() == kind)
            .map(|kind| Self::new(kind, why))
            .ok_or_else(|| format!("`stopped` must begin with interrupted, aborted or failed: {s}"))
    }
}

impl TryFrom<String> for Stop {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<Stop> for String {
    fn from(s: Stop) -> Self {
        s.to_string()
    }
}

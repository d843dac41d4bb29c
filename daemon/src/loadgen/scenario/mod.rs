//! Scenario files (experiment as code): the YAML schema. Loading and validation are in
//! `validate/`, load shapes in `shape.rs`, trigger rules as written in `trigger.rs` (the
//! `triggers` module parses and checks them).
//!
//! The full schema with every field and default is documented in `docs/stress.md`;
//! `examples/seed-matrix.yaml` is a complete example. Unknown keys are refused, and
//! every error names the file, the line and what is wrong.

pub mod arrival;
pub mod body;
pub mod check;
pub mod dataset;
pub mod files;
pub mod json_path;
pub mod limits;
pub mod model;
pub mod overrides;
pub mod pipeline;
pub mod plan;
pub mod ramp;
pub mod replay;
pub mod retry;
pub mod session;
pub mod shape;
pub mod shared_prefix;
pub mod template;
pub mod trace;
pub mod trigger;
pub mod validate;
pub mod vector;
pub mod words;

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use serde::Deserialize;

use crate::target_url::TargetUrl;

pub use crate::loadgen::scenario::shape::Load;
use crate::loadgen::{
    scenario::dataset::DatasetSpec,
    scenario::limits::{
        de_duration, de_opt_dimensions, de_opt_duration, de_opt_in_flight, de_opt_oversize,
        de_opt_tokens_per_s,
    },
    scenario::template::{JsonTemplate, Template},
    scenario::validate::{de_opt_json_template, de_opt_ratio, de_opt_template, de_ratio, de_slos},
};
use crate::measure::{record::Endpoint, slo::Slo};
pub use trigger::WrittenTrigger;

/// Hard ceilings no scenario can exceed (guardrails against typos such as `rate: 20000`).
pub const HARD_MAX_IN_FLIGHT: usize = 100_000;
/// Largest open-loop rate accepted, requests per second.
pub const HARD_MAX_RATE: f64 = 200_000.0;

/// A whole scenario file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Label `scenario` on every metric.
    #[serde(default = "default_name")]
    pub name: String,
    /// Base URL, e.g. `http://127.0.0.1:8000`, parsed once. Non-loopback hosts need
    /// `--allow-remote`.
    pub target: TargetUrl,
    /// Headers sent with every request (e.g. `Authorization`).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Per-request timeout (default 60s).
    #[serde(default = "default_timeout", deserialize_with = "de_duration")]
    pub timeout: Duration,
    /// After Ctrl-C or the last phase, how long in-flight requests may finish (default 5s).
    #[serde(default = "default_grace", deserialize_with = "de_duration")]
    pub grace: Duration,
    /// Cap on requests in flight over the whole run (default 10000).
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: usize,
    /// Abort the run when the error rate of the last second's finished requests exceeds this.
    #[serde(default, deserialize_with = "de_opt_ratio")]
    pub abort_error_rate: Option<f64>,
    /// Requests that must have finished before `abort_error_rate` is checked (default 50).
    #[serde(default = "default_abort_min")]
    pub abort_min_requests: u64,
    /// Random seed (schedules, templates, chaos); default: from the clock.
    pub seed: Option<u64>,
    /// Send a W3C `traceparent` and an `x-request-id` with every request (default true);
    /// `false` (or `--no-trace-headers`) sends neither.
    #[serde(default = "default_trace_headers")]
    pub trace_headers: bool,
    /// Named datasets for `${dataset.*}` and `request.dataset`.
    #[serde(default)]
    pub datasets: BTreeMap<String, DatasetSpec>,
    /// Phases, run one after the other.
    pub phases: Vec<Phase>,
    /// Instead of running the phases: find the highest load of the first one that meets the
    /// SLOs (`stress --find-max`; see `loadgen/knee/`).
    #[serde(default)]
    pub search: Option<SearchBlock>,
    /// Trigger rules evaluated on each window under `stress --explain`, as written: `triggers/`
    /// parses and checks them ([`crate::triggers::of_scenario`]).
    #[serde(default)]
    pub triggers: Vec<WrittenTrigger>,
    /// Where the scenario came from, for errors that point at a line.
    #[serde(skip)]
    pub origin: Origin,
}

/// Where a scenario's text came from: the file (or `the run` for one made from flags) and
/// the text, to find the line an error is about.
#[derive(Debug, Clone)]
pub struct Origin {
    /// The file, as named in errors.
    pub file: String,
    /// Its text (empty for a scenario made in code).
    pub text: Arc<str>,
}

/// The first line (and column), 1-based, of `src` holding `needle`: where an error about that
/// text points.
#[must_use]
pub fn line_of(src: &str, needle: &str) -> Option<(usize, usize)> {
    src.lines()
        .enumerate()
        .find_map(|(i, l)| l.find(needle).map(|c| (i + 1, c + 1)))
}

impl Default for Origin {
    fn default() -> Self {
        Self {
            file: "the run".into(),
            text: Arc::from(""),
        }
    }
}

/// One phase: a load shape held for a duration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Phase {
    /// Phase name (unique).
    pub name: String,
    /// Label `scenario` dimension such as baseline, soak, burst (default: the name).
    pub label: Option<String>,
    /// How long the phase sends (required).
    #[serde(deserialize_with = "de_duration")]
    pub duration: Duration,
    /// Arrival process or concurrency.
    pub load: Load,
    /// Closed loop: start the users spread over this long (see `ramp.rs`); default none
    /// below 500 users, [`ramp::default_for`] from there on; `0s` for none.
    #[serde(default)]
    pub ramp_up: Option<ramp::RampUp>,
    /// What each request looks like.
    #[serde(default)]
    pub request: RequestSpec,
    /// Cap on this phase's requests in flight.
    #[serde(default, deserialize_with = "de_opt_in_flight")]
    pub max_in_flight: Option<usize>,
    /// Cap on requested output tokens per second (sum of `max_tokens` sent).
    #[serde(default, deserialize_with = "de_opt_tokens_per_s")]
    pub max_tokens_per_s: Option<f64>,
    /// What to do with a request when a cap is hit.
    #[serde(default)]
    pub when_capped: CapPolicy,
    /// Fault knobs.
    #[serde(default)]
    pub chaos: ChaosSpec,
    /// SLOs checked at the end of the phase (see `slo.rs` for the grammar).
    #[serde(default, deserialize_with = "de_slos")]
    pub slo: Vec<Slo>,
    /// One-off requests at given offsets into the phase (e.g. trigger an index rebuild).
    #[serde(default)]
    pub events: Vec<EventSpec>,
    /// Run the phase once per value (vector search): the recall/latency frontier.
    #[serde(default)]
    pub sweep: Option<SweepSpec>,
    /// The phase a sweep step was made from (set when the sweep is expanded).
    #[serde(skip)]
    pub sweep_of: Option<String>,
}

/// `sweep:` of a phase: one step per value, each a phase of its own named `NAME@ef<N>`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SweepSpec {
    /// `ef_search` values, e.g. `[16, 32, 64, 128, 256]`.
    pub ef_search: Vec<u32>,
}

/// `search:`: the knee search of the first phase's load.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchBlock {
    /// SLOs every step must meet (with the first phase's own).
    #[serde(default, deserialize_with = "de_slos")]
    pub slo: Vec<Slo>,
    /// First load tried (default: the first phase's rate or users).
    pub start: Option<f64>,
    /// Highest load tried (default 10000 req/s, or 4096 users).
    pub max: Option<f64>,
    /// Length of each step (default 10s).
    #[serde(default, deserialize_with = "de_opt_duration")]
    pub step: Option<Duration>,
    /// The whole search at most (default 5m).
    #[serde(default, deserialize_with = "de_opt_duration")]
    pub budget: Option<Duration>,
    /// Stop when the highest pass and lowest fail are within this share (default 5%).
    #[serde(default, deserialize_with = "de_opt_ratio")]
    pub tolerance: Option<f64>,
}

/// What happens to a request that a cap (in-flight or tokens/s) holds back.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum CapPolicy {
    /// Wait for room; the wait shows as send lag and inside every latency.
    #[default]
    Wait,
    /// Drop it and count it (k6's `dropped_iterations`).
    Drop,
}

/// The request of a phase. Fields that do not apply to the endpoint are refused.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestSpec {
    /// `chat` (default), `completions`, `vector_search` or `http`.
    pub endpoint: Option<Endpoint>,
    /// Path under the target (default per endpoint, e.g. `/v1/chat/completions`).
    pub path: Option<String>,
    /// HTTP method for `http` (default GET, or POST when a body is given).
    pub method: Option<String>,
    /// `model` field (default: the first model of the target's `/v1/models`, see
    /// `models.rs`; `default` when it lists none).
    pub model: Option<String>,
    /// Prompt template (default `${dataset.prompt}` with a dataset, else a fixed prompt).
    #[serde(default, deserialize_with = "de_opt_template")]
    pub prompt: Option<Template>,
    /// Dataset name from `datasets:`.
    pub dataset: Option<String>,
    /// `max_tokens` (default: the dataset row's output length, else server default).
    pub max_tokens: Option<u32>,
    /// `temperature`: a number or a template such as `${random_float(0.3,0.8)}`.
    #[serde(default, deserialize_with = "de_opt_json_template")]
    pub temperature: Option<JsonTemplate>,
    /// Stream the answer (default true for LLM endpoints).
    pub stream: Option<bool>,
    /// LLM: ask the server to generate `max_tokens` tokens whatever the model says
    /// (`"ignore_eos": true`, which vLLM, `SGLang` and llama.cpp accept; vLLM's benchmark
    /// `--ignore-eos`), for fixed output lengths.
    pub ignore_eos: Option<bool>,
    /// Extra JSON fields merged into the body (templated); for `http`, the whole body.
    #[serde(default, deserialize_with = "de_opt_json_template")]
    pub body: Option<JsonTemplate>,
    /// Per-request headers, added to the scenario's.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Vector search: query text template (the server embeds it).
    #[serde(default, deserialize_with = "de_opt_template")]
    pub text: Option<Template>,
    /// Vector search: random unit query vectors of this many dimensions.
    #[serde(default, deserialize_with = "de_opt_dimensions")]
    pub dimensions: Option<usize>,
    /// Vector search: `top_k` (default 10).
    pub top_k: Option<u32>,
    /// Vector search: `ef_search`.
    pub ef_search: Option<u32>,
    /// Vector search: fraction of queries also sent to the exact endpoint for recall@k.
    #[serde(default, deserialize_with = "de_opt_ratio")]
    pub recall_sample: Option<f64>,
    /// Vector search: ground-truth path (default `/v1/vector/exact` for `api: sim`; for
    /// `api: json`, a path answering the same body with the exact neighbours).
    pub exact_path: Option<String>,
    /// Vector search: the API the server speaks, `sim` (default), `chroma`, `qdrant` or
    /// `json` (see `vector/`).
    pub api: Option<vector::ApiKind>,
    /// Vector search (`chroma`, `qdrant`): the collection (default `inferscope`).
    pub collection: Option<String>,
    /// Vector search, `api: json`: body template and JSON paths of the answer.
    pub json: Option<vector::JsonApiSpec>,
    /// Vector search: the corpus the client inserts before the run and searches exactly for
    /// recall@k (any API but `sim`).
    pub corpus: Option<vector::CorpusSpec>,
    /// Vector search: recall below which a sampled query counts as low-recall in the joint
    /// view (default 90%).
    #[serde(default, deserialize_with = "de_opt_ratio")]
    pub low_recall: Option<f64>,
    /// Vector search: advise an index rebuild when a window's recall falls below this
    /// (default 92%).
    #[serde(default, deserialize_with = "de_opt_ratio")]
    pub rebuild_below: Option<f64>,
    /// Chat only: multi-turn conversations instead of single requests (see
    /// `conversation.rs`).
    pub conversation: Option<ConversationSpec>,
    /// LLM: whether an answer did its task (semantic throughput; see `check.rs`).
    pub check: Option<crate::loadgen::scenario::check::CheckSpec>,
    /// Resend requests that failed the way an outage does; gives the phase's MSR (see
    /// `resilience.rs`).
    pub retry: Option<crate::loadgen::scenario::retry::RetrySpec>,
    /// A client-orchestrated pipeline (embed, search, rerank, chat, tools) per arrival instead
    /// of one request; `prompt`/`dataset` give its query (see `pipeline.rs`).
    pub pipeline: Option<crate::loadgen::scenario::pipeline::PipelineSpec>,
    /// Chat only: an agentic session per arrival instead of one request: LLM calls on a
    /// growing history, tool waits, sub-agents, compaction (see `session/`).
    pub session: Option<crate::loadgen::scenario::session::SessionSpec>,
}

/// `request.conversation`: each arrival (open loop) or each user in turn (closed loop) runs a
/// conversation: its turns one after the other, each sending the history so far.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ConversationSpec {
    /// Turns per conversation: a `ShareGPT` conversation's own user turns, at most this many;
    /// otherwise this many prompts (dataset rows or template renders). Default 4.
    #[serde(default = "default_turns")]
    pub turns: u32,
    /// Pause between an answer and the next turn (a user reading and typing). Default 0s.
    #[serde(default, deserialize_with = "de_duration")]
    pub think_time: Duration,
    /// The assistant messages in the history: `model` (the answers this run got, default) or
    /// `recorded` (the dataset's own replies; `ShareGPT` only).
    #[serde(default)]
    pub reply: ReplySource,
    /// A system prompt of this many words, the same in every conversation (a shared prefix a
    /// prefix cache can reuse). Default none.
    pub system_prompt_words: Option<u32>,
    /// Ask for this many `top_logprobs` per token (1..=20) and report the inference
    /// consistency entropy (ICE) of each conversation. Default none.
    pub logprobs: Option<u32>,
}

/// Where the history's assistant messages come from.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ReplySource {
    /// The answers the server gave in this run.
    #[default]
    Model,
    /// The replies recorded in the dataset (`ShareGPT`'s `gpt` turns).
    Recorded,
}

fn default_turns() -> u32 {
    4
}

/// Fault knobs of a phase (fractions of its requests).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ChaosSpec {
    /// Fraction sent with `max_tokens = 1`.
    #[serde(default, deserialize_with = "de_ratio")]
    pub max_tokens_one: f64,
    /// Fraction the client closes right after the first token.
    #[serde(default, deserialize_with = "de_ratio")]
    pub abort_mid_stream: f64,
    /// Fraction whose prompt is inflated to `oversize_tokens` words.
    #[serde(default, deserialize_with = "de_ratio")]
    pub oversize_prompt: f64,
    /// Size of an oversize prompt in words (default 200000, at most 1000000).
    #[serde(default, deserialize_with = "de_opt_oversize")]
    pub oversize_tokens: Option<u32>,
    /// Bursts of identical requests released together, on top of the phase's load.
    pub stampede: Option<StampedeSpec>,
}

/// `chaos.stampede`: a hot prompt whose cached prefix expired, asked by many at once (cache
/// breakdown, 击穿): every copy that arrives before the first one's prefill is done computes
/// the same prefix again.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StampedeSpec {
    /// Identical requests per burst (2..=10000).
    pub size: u32,
    /// Time between bursts; the first comes `every` after the phase's start.
    #[serde(deserialize_with = "de_duration")]
    pub every: Duration,
    /// A path that gets a POST, answered before each burst, to drop the server's prefix cache:
    /// vLLM's `/reset_prefix_cache` (dev mode), `SGLang`'s `/flush_cache`, the sim's
    /// `/reset_prefix_cache`. Default none: the cache is left alone (a prompt template that
    /// varies gives each burst a prompt not asked before).
    pub reset: Option<String>,
}

/// A one-off request during a phase.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct EventSpec {
    /// Offset into the phase (default 0s).
    #[serde(default, deserialize_with = "de_duration")]
    pub at: Duration,
    /// Method (default POST).
    #[serde(default = "default_post")]
    pub method: String,
    /// Path under the target, e.g. `/v1/vector/rebuild`.
    pub path: String,
    /// JSON body (default `{}`).
    pub body: Option<serde_json::Value>,
}

/// A scenario that cannot be used: file, line (when known) and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("{file}{}: {msg}", line.map(|(l, c)| format!(":{l}:{c}")).unwrap_or_default())]
pub struct ScenarioError {
    /// The scenario file (or `<flags>`).
    pub file: String,
    /// 1-based line and column.
    pub line: Option<(usize, usize)>,
    /// What is wrong and what to do.
    pub msg: String,
}

impl Phase {
    /// The ramp its closed-loop users start over, and whether it is the default one (the
    /// phase set none); `None` for an open loop, `ramp_up: 0s`, or too few users for a default.
    #[must_use]
    pub fn ramp(&self) -> Option<(ramp::RampUp, bool)> {
        let Load::Concurrency { users } = self.load else {
            return None;
        };
        match self.ramp_up {
            Some(r) if r.duration.is_zero() => None,
            Some(r) => Some((r, false)),
            None => ramp::default_for(users, self.duration).map(|r| (r, true)),
        }
    }
}

impl Scenario {
    /// A scenario of one phase against `target`, every other setting at its default (the
    /// defaults a scenario file gets for the fields it leaves out).
    #[must_use]
    pub fn one_phase(target: TargetUrl, phase: Phase) -> Self {
        Self {
            name: default_name(),
            target,
            headers: BTreeMap::new(),
            timeout: default_timeout(),
            grace: default_grace(),
            max_in_flight: default_max_in_flight(),
            abort_error_rate: None,
            abort_min_requests: default_abort_min(),
            seed: None,
            trace_headers: default_trace_headers(),
            datasets: BTreeMap::new(),
            phases: vec![phase],
            search: None,
            triggers: Vec::new(),
            origin: Origin::default(),
        }
    }
}

fn default_name() -> String {
    "stress".into()
}
fn default_timeout() -> Duration {
    Duration::from_mins(1)
}
fn default_grace() -> Duration {
    Duration::from_secs(5)
}
fn default_max_in_flight() -> usize {
    10_000
}
fn default_trace_headers() -> bool {
    true
}
fn default_abort_min() -> u64 {
    50
}
fn default_post() -> String {
    "POST".into()
}

//! The per-request record: every timestamp of one request, kept for the whole run.
//!
//! Times are microseconds since the run's start (`StressReport::started_unix_ns` /
//! `started_monotonic_ns` anchor them to wall-clock and `CLOCK_MONOTONIC`, the clock
//! eBPF's `bpf_ktime_get_ns` uses), so later stages can join a request with kernel
//! events by time and by the connection's 4-tuple (`local_addr`, `remote_addr`).

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

/// What kind of request this was.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Endpoint {
    /// `POST /v1/chat/completions`.
    Chat,
    /// `POST /v1/completions`.
    Completions,
    /// `POST /v1/vector/search` (recall checked against `/v1/vector/exact`).
    VectorSearch,
    /// Any plain HTTP request (benchmarks, health checks).
    Http,
}

impl Endpoint {
    /// The path used when the scenario does not give one.
    #[must_use]
    pub fn default_path(self) -> &'static str {
        match self {
            Endpoint::Chat => "/v1/chat/completions",
            Endpoint::Completions => "/v1/completions",
            Endpoint::VectorSearch => "/v1/vector/search",
            Endpoint::Http => "/",
        }
    }

    /// Short label for tables and metric labels.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Endpoint::Chat => "chat",
            Endpoint::Completions => "completions",
            Endpoint::VectorSearch => "vector_search",
            Endpoint::Http => "http",
        }
    }
}

/// Why a request failed.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// TCP connect failed (refused, unreachable, connect timeout).
    Connect,
    /// The TLS handshake of an `https://` target failed (unknown CA, wrong host name,
    /// expired certificate, a server that does not speak TLS): the message says what to do.
    Tls,
    /// The per-request timeout expired.
    Timeout,
    /// The server answered with a non-2xx status.
    HttpStatus,
    /// The body could not be understood: bad JSON, bad SSE, or a stream that ended
    /// without `[DONE]` and without a `finish_reason` (truncated).
    MalformedStream,
    /// The stream carried an `{"error": ..}` event (or `event: error`).
    ServerErrorEvent,
    /// The connection broke while sending or reading (reset, closed early).
    Transport,
    /// The client stopped the request: chaos knob `abort_fraction`, or shutdown.
    Aborted,
    /// The load generator ran out of file descriptors (EMFILE/ENFILE) opening a connection:
    /// its own limit, not the server's fault. Raise `ulimit -n` or lower the load.
    ClientFdLimit,
}

/// Longest `error_message` kept, bytes.
pub const MAX_ERROR_MESSAGE: usize = 1024;

impl RequestRecord {
    /// Bytes this record holds in memory, estimated: the struct, its token times and its
    /// strings (what the records' budget counts).
    #[must_use]
    pub fn footprint(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.token_us.capacity() * std::mem::size_of::<u64>()
            + self.error_message.as_ref().map_or(0, String::capacity)
            + self.finish_reason.as_ref().map_or(0, String::capacity)
            + self.steps.capacity() * std::mem::size_of::<StepRecord>()
            + self
                .steps
                .iter()
                .map(|st| st.error_message.as_ref().map_or(0, String::capacity))
                .sum::<usize>()
    }
}

impl ErrorClass {
    /// All classes, in report order.
    pub const ALL: [ErrorClass; 9] = [
        ErrorClass::Connect,
        ErrorClass::Tls,
        ErrorClass::Timeout,
        ErrorClass::HttpStatus,
        ErrorClass::MalformedStream,
        ErrorClass::ServerErrorEvent,
        ErrorClass::Transport,
        ErrorClass::Aborted,
        ErrorClass::ClientFdLimit,
    ];

    /// The `snake_case` name used in reports.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            ErrorClass::Connect => "connect",
            ErrorClass::Tls => "tls",
            ErrorClass::Timeout => "timeout",
            ErrorClass::HttpStatus => "http_status",
            ErrorClass::MalformedStream => "malformed_stream",
            ErrorClass::ServerErrorEvent => "server_error_event",
            ErrorClass::Transport => "transport",
            ErrorClass::Aborted => "aborted",
            ErrorClass::ClientFdLimit => "client_fd_limit",
        }
    }
}

/// Where the output-token count came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TokenSource {
    /// The server's `usage.completion_tokens` (exact).
    Usage,
    /// No usage: one token per non-empty content delta. Under-counts when a server
    /// sends several tokens per chunk (speculative decoding); never over-counts.
    Deltas,
}

/// Which chaos knob, if any, shaped this request.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Chaos {
    /// Sent with `max_tokens = 1`.
    MaxTokensOne,
    /// The client closes the stream after the first token on purpose.
    AbortMidStream,
    /// The prompt was inflated beyond any context window.
    OversizePrompt,
    /// One of a burst of identical requests released together (`chaos.stampede`).
    Stampede,
}

impl Chaos {
    /// Every knob.
    pub const ALL: [Chaos; 4] = [
        Chaos::MaxTokensOne,
        Chaos::AbortMidStream,
        Chaos::OversizePrompt,
        Chaos::Stampede,
    ];

    /// The knob's name in the scenario's `chaos:` and the report's `counts.chaos`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Chaos::MaxTokensOne => "max_tokens_one",
            Chaos::AbortMidStream => "abort_mid_stream",
            Chaos::OversizePrompt => "oversize_prompt",
            Chaos::Stampede => "stampede",
        }
    }
}

/// One request, from its intended start to its end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RequestRecord {
    /// Sequence number within the run (unique).
    pub id: u64,
    /// Index of the phase in `StressReport::phases`.
    pub phase: u32,
    /// Kind of request.
    pub endpoint: Endpoint,
    /// When the arrival schedule wanted it sent (µs since run start).
    pub intended_us: u64,
    /// When it was handed to the connection (µs since run start). `actual - intended`
    /// is the send lag: the generator's own delay, caps, or a busy pool.
    pub actual_us: u64,
    /// Response headers received (µs since run start).
    pub first_byte_us: Option<u64>,
    /// Each content-bearing chunk (µs since run start); empty when not streaming.
    pub token_us: Vec<u64>,
    /// Last byte read or failure (µs since run start).
    pub end_us: u64,
    /// HTTP status, when a response arrived.
    pub status: Option<u16>,
    /// Failure class; `None` when the request succeeded.
    pub error: Option<ErrorClass>,
    /// Human-readable failure detail.
    pub error_message: Option<String>,
    /// Client side of the TCP connection (ip:port), to join kernel events by 4-tuple.
    pub local_addr: Option<SocketAddr>,
    /// Server side of the TCP connection.
    pub remote_addr: Option<SocketAddr>,
    /// Prompt tokens reported by the server.
    pub input_tokens: Option<u32>,
    /// Output tokens (see `token_source`).
    pub output_tokens: Option<u32>,
    /// Where `output_tokens` came from.
    pub token_source: Option<TokenSource>,
    /// `finish_reason` of the first choice.
    pub finish_reason: Option<String>,
    /// recall@k of a vector search, when this query was sampled for ground truth.
    pub recall: Option<f64>,
    /// Chaos knob applied to this request.
    pub chaos: Option<Chaos>,
    /// Succeeded and met every per-request SLO of its phase (counts toward goodput).
    pub good: bool,
    /// The 1-based turn of a multi-turn conversation this request was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u32>,
    /// Whether the answer passed the phase's `check:` (absent without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<bool>,
    /// Mean token entropy of the answer from its `top_logprobs`, nats (when asked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entropy: Option<f64>,
    /// Under a retry policy: 1 for the first attempt, then 2, 3, ... for the retries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// Sent a second time on a fresh connection because the server had closed the kept-alive
    /// one before answering (not the server's error; counted apart).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reconnected: bool,
    /// A pipeline task's steps, in order (`request.pipeline`; absent for other requests). The
    /// record itself is the task: from its intended start to its last step's end, with the
    /// final chat's tokens.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepRecord>,
    /// A pipeline task with a `tools` step: the tool-call rounds its chat went through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_depth: Option<u32>,
    /// A call of an agentic session (`request.session`): the session, the agent and its
    /// depth, and the context length it sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionCall>,
    /// An LLM request's body, hashed: requests with the same key ask the same prompt the same
    /// way (a prefix cache serves the later ones, unless they overlap the first one's prefill).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_key: Option<u64>,
    /// Started during its closed-loop phase's `ramp_up`: left out of the phase's latency
    /// percentiles and reported apart (`PhaseReport::ramp`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ramp_up: bool,
    /// This request waited for its connection to open (a new one: none was free, or the
    /// server had closed it): the TCP connect, and the TLS handshake of an `https://` target,
    /// µs. Part of its TTFT and E2E; the phase's `connect` percentiles are these.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_us: Option<u32>,
    /// The trace context it was sent with (`traceparent`, `x-request-id`); absent when the run
    /// sends none (`trace_headers: false`, `--no-trace-headers`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<super::trace_context::TraceContext>,
}

impl RequestRecord {
    /// A record with only the schedule filled in.
    #[must_use]
    pub fn new(id: u64, phase: u32, endpoint: Endpoint, intended_us: u64) -> Self {
        RequestRecord {
            id,
            phase,
            endpoint,
            intended_us,
            actual_us: intended_us,
            first_byte_us: None,
            token_us: Vec::new(),
            end_us: intended_us,
            status: None,
            error: None,
            error_message: None,
            local_addr: None,
            remote_addr: None,
            input_tokens: None,
            output_tokens: None,
            token_source: None,
            finish_reason: None,
            recall: None,
            chaos: None,
            good: false,
            turn: None,
            check: None,
            entropy: None,
            attempt: None,
            reconnected: false,
            steps: Vec::new(),
            tool_depth: None,
            session: None,
            prompt_key: None,
            ramp_up: false,
            connect_us: None,
            trace: None,
        }
    }

    /// Marks the request failed.
    pub fn fail(&mut self, class: ErrorClass, message: impl Into<String>) {
        let mut message = message.into();
        // A server's error event can be megabytes; the record keeps its start.
        if message.len() > MAX_ERROR_MESSAGE {
            let mut cut = MAX_ERROR_MESSAGE;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push_str("...");
        }
        self.error = Some(class);
        self.error_message = Some(message);
    }

    /// Send lag: actual minus intended start (µs).
    #[must_use]
    pub fn send_lag_us(&self) -> u64 {
        self.actual_us.saturating_sub(self.intended_us)
    }

    /// Send lag as a measure of the generator keeping its schedule; `None` for a stampede's
    /// copy: a burst released at one instant is sent one request after another by any
    /// client, and that spread is the burst's, not a generator falling behind.
    #[must_use]
    pub fn schedule_lag_us(&self) -> Option<u64> {
        (self.chaos != Some(Chaos::Stampede)).then(|| self.send_lag_us())
    }

    /// End-to-end latency from the intended start (coordinated-omission corrected).
    #[must_use]
    pub fn e2e_us(&self) -> u64 {
        self.end_us.saturating_sub(self.intended_us)
    }

    /// Time to first token from the intended start. Non-streaming LLM requests get all
    /// tokens at once, so their TTFT is their E2E; plain HTTP has none.
    #[must_use]
    pub fn ttft_us(&self) -> Option<u64> {
        match (self.token_us.first(), self.endpoint) {
            (Some(t), _) => Some(t.saturating_sub(self.intended_us)),
            (None, Endpoint::Chat | Endpoint::Completions) if self.error.is_none() => {
                Some(self.e2e_us())
            }
            _ => None,
        }
    }

    /// Time per output token after the first: (E2E - TTFT) / (tokens - 1), as vLLM does.
    #[must_use]
    pub fn tpot_us(&self) -> Option<f64> {
        let tokens = self.output_tokens?;
        if tokens < 2 || self.token_us.is_empty() {
            return None;
        }
        let first = *self.token_us.first()?;
        Some(self.end_us.saturating_sub(first) as f64 / f64::from(tokens - 1))
    }

    /// Gaps between consecutive content chunks (µs).
    pub fn itl_us(&self) -> impl Iterator<Item = u64> + '_ {
        self.token_us.windows(2).map(|w| w[1].saturating_sub(w[0]))
    }

    /// Whether this failure counts against the error rate: aborts the scenario asked
    /// for (chaos) do not.
    #[must_use]
    pub fn counts_as_error(&self) -> bool {
        match self.error {
            None => false,
            Some(ErrorClass::Aborted) => self.chaos != Some(Chaos::AbortMidStream),
            Some(_) => true,
        }
    }
}

/// The kind of a pipeline step; a pipeline runs them in this order, each at most once.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum StepKind {
    /// `POST /v1/embeddings` (the `OpenAI` shape): the query's vector.
    Embed,
    /// A vector search (any vector API): the documents.
    Search,
    /// `POST /v1/rerank` (vLLM / TEI shape): the documents, best first.
    Rerank,
    /// The streamed chat completion with the documents in its prompt.
    Chat,
    /// The tool calls the chat answered with, each followed by the chat's continuation.
    Tools,
}

impl StepKind {
    /// Every kind, in pipeline order.
    pub const ALL: [StepKind; 5] = [
        StepKind::Embed,
        StepKind::Search,
        StepKind::Rerank,
        StepKind::Chat,
        StepKind::Tools,
    ];

    /// The name in scenarios and reports.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            StepKind::Embed => "embed",
            StepKind::Search => "search",
            StepKind::Rerank => "rerank",
            StepKind::Chat => "chat",
            StepKind::Tools => "tools",
        }
    }
}

/// How a step ended.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum StepOutcome {
    /// It did its work.
    Ok,
    /// It failed or passed its deadline, and its `fallback` (skip or a default) stood in.
    Fallback,
    /// It failed without a fallback: the task failed here.
    Failed,
    /// Nothing to do (a re-rank of no documents): not sent.
    Skipped,
}

/// One step of a pipeline task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StepRecord {
    /// The step.
    pub kind: StepKind,
    /// When it started (µs since the run's start).
    pub start_us: u64,
    /// When it ended: its answer, its failure or its deadline (µs since the run's start).
    pub end_us: u64,
    /// How it ended.
    pub outcome: StepOutcome,
    /// HTTP exchanges it made (a `tools` step: every tool call and every chat continuation).
    pub calls: u32,
    /// Why it failed (`fallback` and `failed`); `timeout` when its deadline passed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorClass>,
    /// The failure's detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    /// `chat` and `tools`: time to first token of the last chat request the step sent, from
    /// that request's send (µs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_us: Option<u64>,
}

impl StepRecord {
    /// The step's latency (µs).
    #[must_use]
    pub fn latency_us(&self) -> u64 {
        self.end_us.saturating_sub(self.start_us)
    }
}

/// The session side of one LLM call's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SessionCall {
    /// The session (unique in the run; drawn from the same sequence as request ids, so no
    /// request has it).
    pub id: u64,
    /// Which agent of the session sent it: 0 the main agent, then each sub-agent as it starts.
    pub agent: u32,
    /// 0 for the main agent, 1 for its sub-agents, 2 for theirs, ...
    pub depth: u32,
    /// The prompt's length, tokens as the client counts them (made-up text by its tokens,
    /// answers by their `completion_tokens`, other text by its words).
    pub context_tokens: u32,
    /// The call asked the model to summarise the oldest turns (compaction), not to go on.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub compaction: bool,
}

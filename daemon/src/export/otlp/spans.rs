//! One load-generator request as a trace: a client span for the whole request (with the trace
//! id and span id its `traceparent` carried, and the generative-AI conventions' `gen_ai.*`
//! attributes of an LLM call), a child span per stage it is given (a live export gives the
//! client's: send lag, response headers, first token, decode, and one per pipeline step),
//! `first_token` and `last_token` events, and, when one is given, the verdict of the request's
//! time window as an attribute (a live export gives none).

use std::time::{Duration, SystemTime};

use opentelemetry::trace::{Event, SpanKind, Status, TraceContextExt, Tracer};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::SdkTracer;

use super::ids;
use crate::collect::catalog::Labels;
use crate::quantile::exact::nearest_rank;

/// One stage of a request's waterfall, e.g. `loadgen.send_lag` or `gen_ai.decode`.
#[derive(Debug, Clone, PartialEq)]
pub struct Stage {
    /// Stage name; becomes the child span's name.
    pub name: String,
    /// When the stage began.
    pub start: SystemTime,
    /// When it ended.
    pub end: SystemTime,
}

/// A request the load generator completed (or failed), as the exporter needs it. The load
/// generator and the attribution stage fill it in; nothing here depends on their types.
#[derive(Debug, Clone, PartialEq)]
pub struct SampledRequest {
    /// Send time (the intended start for open-loop load, so latencies include queueing in the
    /// generator).
    pub start: SystemTime,
    /// Last byte received or failure.
    pub end: SystemTime,
    /// Time to first token, from `start`.
    pub ttft: Option<Duration>,
    /// Mean time per output token after the first.
    pub tpot: Option<Duration>,
    /// Prompt tokens.
    pub input_tokens: Option<u64>,
    /// Generated tokens.
    pub output_tokens: Option<u64>,
    /// Error class (`timeout`, `500`, `connect`), bounded: it becomes the `error.type` label.
    pub error: Option<String>,
    /// Waterfall stages, any order.
    pub stages: Vec<Stage>,
    /// Verdict of the window the request fell in (`kv_cache`, `queueing`, `none`, ...).
    pub verdict: Option<String>,
    /// Span-only attributes (request id, prompt cluster, ...): never on metrics.
    pub attributes: Vec<(String, String)>,
    /// Gaps between consecutive tokens (inter-token latency); empty when not streamed. With
    /// `ttft`, gives the span a `last_token` event carrying the gaps' p50, p99 and max.
    pub itl: Vec<Duration>,
    /// The trace id and span id the request was sent with (its `traceparent`): the request
    /// span takes them, so that the server's own spans join it. `None`: random ones.
    pub ids: Option<(u128, u64)>,
    /// An LLM call: what the `gen_ai.client.*` metrics and the span's `gen_ai.*` attributes
    /// need. `None` for vector searches, plain HTTP and pipeline tasks.
    pub gen_ai: Option<GenAiCall>,
    /// A pipeline task: its tool-call depth and what each step did. `None` otherwise.
    pub pipeline: Option<PipelineTask>,
}

/// A pipeline task as the orchestration metrics count it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PipelineTask {
    /// Tool calls of its `tools` step (its depth), when it has one.
    pub tool_depth: Option<u32>,
    /// Each step it ran.
    pub steps: Vec<StepCount>,
}

/// One step of a pipeline task: the hop it called.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepCount {
    /// The step (`embed`, `search`, `rerank`, `chat`, `tools`): the `inferscope.step` attribute.
    pub step: &'static str,
    /// HTTP exchanges it made.
    pub calls: u32,
    /// Whether its fallback stood in (it failed or passed its deadline).
    pub fallback: bool,
}

/// An LLM call as the generative-AI semantic conventions describe it.
#[derive(Debug, Clone, PartialEq)]
pub struct GenAiCall {
    /// `gen_ai.operation.name`: `chat` or `text_completion`.
    pub operation: &'static str,
    /// `gen_ai.request.model`, when known (not a templated one).
    pub model: Option<String>,
    /// `server.address` and `server.port` of the target.
    pub server: Option<(String, u16)>,
    /// From the send to the last byte (the conventions time the client's call, not the
    /// schedule: unlike `duration`, no send lag).
    pub duration: Duration,
    /// From the send to the first chunk of a streamed answer; `None` when not streamed.
    pub first_chunk: Option<Duration>,
}

impl GenAiCall {
    /// The `gen_ai.provider.name` of every call: `openai`, the API inferscope speaks (the
    /// engine behind it is the resource's `inferscope.engine.name`).
    pub const PROVIDER: &'static str = "openai";

    /// The conventions' attributes: operation, provider, model, server address and port.
    #[must_use]
    pub fn attributes(&self) -> Vec<KeyValue> {
        let mut out = vec![
            KeyValue::new("gen_ai.operation.name", self.operation),
            KeyValue::new("gen_ai.provider.name", Self::PROVIDER),
        ];
        if let Some(m) = &self.model {
            out.push(KeyValue::new("gen_ai.request.model", m.clone()));
        }
        if let Some((host, port)) = &self.server {
            out.push(KeyValue::new("server.address", host.clone()));
            out.push(KeyValue::new("server.port", i64::from(*port)));
        }
        out
    }
}

impl SampledRequest {
    /// End-to-end duration (zero if the clock went backwards).
    #[must_use]
    pub fn duration(&self) -> Duration {
        self.end.duration_since(self.start).unwrap_or_default()
    }
}

/// Name of the request span.
pub const REQUEST_SPAN: &str = "inferscope.request";

/// Emits the request's spans through `tracer`.
pub(crate) fn emit(tracer: &SdkTracer, req: &SampledRequest, labels: &Labels) {
    let mut attrs: Vec<KeyValue> = labels
        .pairs(None)
        .into_iter()
        .map(|(k, v)| KeyValue::new(k, v))
        .collect();
    if let Some(v) = &req.verdict {
        attrs.push(KeyValue::new("inferscope.verdict", v.clone()));
    }
    if let Some(t) = req.ttft {
        attrs.push(KeyValue::new(
            "inferscope.time_to_first_token",
            t.as_secs_f64(),
        ));
    }
    if let Some(n) = req.input_tokens {
        attrs.push(KeyValue::new("gen_ai.usage.input_tokens", n as i64));
    }
    if let Some(n) = req.output_tokens {
        attrs.push(KeyValue::new("gen_ai.usage.output_tokens", n as i64));
    }
    if let Some(e) = &req.error {
        attrs.push(KeyValue::new("error.type", e.clone()));
    }
    if let Some(call) = &req.gen_ai {
        attrs.extend(call.attributes());
    }
    attrs.extend(
        req.attributes
            .iter()
            .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
    );

    let mut events = Vec::new();
    if let Some(t) = req.ttft {
        events.push(Event::new("first_token", req.start + t, Vec::new(), 0));
        if !req.itl.is_empty() {
            let last = req.start + t + req.itl.iter().sum::<Duration>();
            events.push(Event::new(
                LAST_TOKEN_EVENT,
                last,
                itl_attributes(&req.itl),
                0,
            ));
        }
    }
    let span = ids::with_ids(req.ids, || {
        tracer
            .span_builder(REQUEST_SPAN)
            .with_kind(SpanKind::Client)
            .with_start_time(req.start)
            .with_attributes(attrs)
            .with_events(events)
            .start_with_context(tracer, &Context::new())
    });
    let cx = Context::new().with_span(span);
    if let Some(e) = &req.error {
        cx.span().set_status(Status::error(e.clone()));
    }
    for stage in &req.stages {
        let child = tracer
            .span_builder(stage.name.clone())
            .with_kind(SpanKind::Internal)
            .with_start_time(stage.start)
            .start_with_context(tracer, &cx);
        let child_cx = Context::new().with_span(child);
        child_cx.span().end_with_timestamp(stage.end);
    }
    cx.span().end_with_timestamp(req.end);
}

/// Name of the event at a streamed request's last token.
pub const LAST_TOKEN_EVENT: &str = "last_token";

/// The inter-token gaps summed up: `gen_ai.itl.p50`, `.p99`, `.max` (seconds) and `.count`.
/// One event rather than one per token: a long answer would pass the SDK's event limit.
fn itl_attributes(itl: &[Duration]) -> Vec<KeyValue> {
    let mut s: Vec<f64> = itl.iter().map(Duration::as_secs_f64).collect();
    s.sort_by(f64::total_cmp);
    let q = |p: f64| nearest_rank(&s, p).unwrap_or_default();
    vec![
        KeyValue::new("gen_ai.itl.p50", q(0.5)),
        KeyValue::new("gen_ai.itl.p99", q(0.99)),
        KeyValue::new("gen_ai.itl.max", q(1.0)),
        KeyValue::new("gen_ai.itl.count", s.len() as i64),
    ]
}

/// Name of the span that carries a trigger firing.
pub const TRIGGER_SPAN: &str = "inferscope.trigger";

/// Emits a trigger firing as a zero-length span with a `trigger.fired` event, both carrying
/// `attributes` (rule, window, values, verdict, outcome).
pub(crate) fn emit_trigger(tracer: &SdkTracer, at: SystemTime, attributes: &[(String, String)]) {
    let attrs: Vec<KeyValue> = attributes
        .iter()
        .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
        .collect();
    let span = tracer
        .span_builder(TRIGGER_SPAN)
        .with_kind(SpanKind::Internal)
        .with_start_time(at)
        .with_attributes(attrs.clone())
        .with_events(vec![Event::new("trigger.fired", at, attrs, 0)])
        .start_with_context(tracer, &Context::new());
    let cx = Context::new().with_span(span);
    cx.span().end_with_timestamp(at);
}

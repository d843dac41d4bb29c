//! The metric instruments: one per time-line signal (from the shared catalogue) plus the
//! per-request histograms that have OpenTelemetry semantic-convention names: HTTP's request
//! duration, the generative-AI client metrics of LLM calls (`gen_ai.client.operation.duration`,
//! `.time_to_first_chunk`, `.time_per_output_chunk`, `gen_ai.client.token.usage`) and the
//! server-side TTFT and TPOT as the load generator measured them.
//!
//! Every attribute set is bounded: the time-line labels (scenario, phase, endpoint, load level),
//! a `stat` out of four, `error.type`, `gen_ai.token.type`, and an LLM call's operation,
//! provider, model and server (one per phase). Nothing per request, so the SDK's aggregation
//! state (and so memory) does not grow with the number of requests.

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Gauge, Histogram, Meter};

use crate::attribute::{Cause, WindowVerdict};
use crate::collect::catalog::{Kind, Labels, SIGNALS, Signal};
use crate::collect::timeline::Window;
use crate::export::otlp::spans::{GenAiCall, PipelineTask, SampledRequest};

/// Semantic-convention name of the per-request duration histogram.
pub const HTTP_CLIENT_DURATION: &str = "http.client.request.duration";
/// Semantic-convention name of the time-to-first-token histogram.
pub const GEN_AI_TTFT: &str = "gen_ai.server.time_to_first_token";
/// Semantic-convention name of the time-per-output-token histogram.
pub const GEN_AI_TPOT: &str = "gen_ai.server.time_per_output_token";
/// Semantic-convention name of the token-usage histogram.
pub const GEN_AI_TOKENS: &str = "gen_ai.client.token.usage";
/// Semantic-convention name of the LLM call duration histogram (from the send).
pub const GEN_AI_OPERATION_DURATION: &str = "gen_ai.client.operation.duration";
/// Semantic-convention name of a streamed call's time to its first chunk (from the send).
pub const GEN_AI_TIME_TO_FIRST_CHUNK: &str = "gen_ai.client.operation.time_to_first_chunk";
/// Semantic-convention name of the time between a streamed call's chunks (one per chunk
/// after the first).
pub const GEN_AI_TIME_PER_OUTPUT_CHUNK: &str = "gen_ai.client.operation.time_per_output_chunk";

// Bucket boundaries advised by the semantic conventions for each instrument.
const HTTP_BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];
const TTFT_BUCKETS: [f64; 16] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];
const TPOT_BUCKETS: [f64; 13] = [
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
];
/// The generative-AI client conventions' boundaries for durations, time to first chunk and time per
/// output chunk alike.
const GEN_AI_CLIENT_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];
const TOKEN_BUCKETS: [f64; 14] = [
    1.0,
    4.0,
    16.0,
    64.0,
    256.0,
    1024.0,
    4096.0,
    16384.0,
    65536.0,
    262_144.0,
    1_048_576.0,
    4_194_304.0,
    16_777_216.0,
    67_108_864.0,
];

enum Instrument {
    Counter(Counter<f64>),
    Gauge(Gauge<f64>),
}

/// All instruments, created once per exporter.
pub(crate) struct Instruments {
    signals: Vec<(&'static Signal, Instrument)>,
    duration: Histogram<f64>,
    ttft: Histogram<f64>,
    tpot: Histogram<f64>,
    tokens: Histogram<u64>,
    operation: Histogram<f64>,
    first_chunk: Histogram<f64>,
    per_chunk: Histogram<f64>,
    verdicts: VerdictGauges,
    pipeline: PipelineInstruments,
}

/// A pipeline task's orchestration: its tool-call depth, and each step's calls and fallbacks.
struct PipelineInstruments {
    tool_depth: Histogram<u64>,
    step_calls: Counter<u64>,
    step_fallbacks: Counter<u64>,
}

/// Tool-call depth of a pipeline task.
pub const PIPELINE_TOOL_DEPTH: &str = "inferscope.pipeline.tool_depth";
/// HTTP exchanges each pipeline step made (attribute `inferscope.step`).
pub const PIPELINE_STEP_CALLS: &str = "inferscope.pipeline.step.calls";
/// Pipeline steps whose fallback stood in (attribute `inferscope.step`).
pub const PIPELINE_STEP_FALLBACKS: &str = "inferscope.pipeline.step.fallbacks";

impl PipelineInstruments {
    fn new(meter: &Meter) -> Self {
        Self {
            tool_depth: meter
                .u64_histogram(PIPELINE_TOOL_DEPTH)
                .with_unit("{call}")
                .with_description("Tool calls of a pipeline task's tools step (its depth).")
                .with_boundaries(vec![0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 32.0])
                .build(),
            step_calls: meter
                .u64_counter(PIPELINE_STEP_CALLS)
                .with_unit("{call}")
                .with_description("HTTP exchanges a pipeline step made, by step.")
                .build(),
            step_fallbacks: meter
                .u64_counter(PIPELINE_STEP_FALLBACKS)
                .with_unit("{step}")
                .with_description(
                    "Pipeline steps that failed or passed their deadline and whose fallback stood in, by step.",
                )
                .build(),
        }
    }

    /// Records `task`, labelled `attrs` (its phase's) and `inferscope.step`.
    fn record(&self, task: &PipelineTask, attrs: &[KeyValue]) {
        if let Some(d) = task.tool_depth {
            self.tool_depth.record(u64::from(d), attrs);
        }
        for s in &task.steps {
            let mut a = attrs.to_vec();
            a.push(KeyValue::new("inferscope.step", s.step));
            self.step_calls.add(u64::from(s.calls), &a);
            if s.fallback {
                self.step_fallbacks.add(1, &a);
            }
        }
    }
}

/// A window's verdict and a gateway's hops, as gauges.
struct VerdictGauges {
    verdict: Gauge<f64>,
    confidence: Gauge<f64>,
    hop_part: Gauge<f64>,
    hop_holds: Gauge<f64>,
    hop_calls: Gauge<f64>,
}

impl VerdictGauges {
    fn new(meter: &Meter) -> Self {
        let gauge = |name: &'static str, unit: &'static str, description: &'static str| {
            meter
                .f64_gauge(name)
                .with_unit(unit)
                .with_description(description)
                .build()
        };
        Self {
            verdict: gauge(
                VERDICT,
                "",
                "The latest window's verdict: 1 for its cause, 0 for every other cause.",
            ),
            confidence: gauge(
                VERDICT_CONFIDENCE,
                "",
                "Confidence of the latest window's verdict, 0..1.",
            ),
            hop_part: gauge(
                HOP_PART,
                "ms",
                "A gateway's latest window: each called server's part of its rise over its baseline, and orchestration, its own.",
            ),
            hop_holds: gauge(
                HOP_HOLDS,
                "",
                "A gateway's latest window: 1 for the hop holding its rise, 0 for the others.",
            ),
            hop_calls: gauge(
                HOP_CALLS_PER_REQUEST,
                "",
                "A gateway's latest window: the exchanges it asked each server it called for, per request it answered.",
            ),
        }
    }
}

/// Name of the verdict gauge: 1 for the latest window's cause, 0 for every other cause.
pub const VERDICT: &str = "inferscope.verdict";
/// Name of the verdict confidence gauge.
pub const VERDICT_CONFIDENCE: &str = "inferscope.verdict.confidence";
/// A gateway's hops (attribute `inferscope.hop`): each one's part of its rise, ms.
pub const HOP_PART: &str = "inferscope.hop.part";
/// A gateway's hops: 1 for the one holding its rise.
pub const HOP_HOLDS: &str = "inferscope.hop.holds";
/// A gateway's hops: its calls to each per request it answered.
pub const HOP_CALLS_PER_REQUEST: &str = "inferscope.hop.calls_per_request";

impl Instruments {
    pub(crate) fn new(meter: &Meter) -> Self {
        let signals = SIGNALS
            .iter()
            .map(|s| {
                let i = match s.kind {
                    Kind::Counter => Instrument::Counter(
                        meter
                            .f64_counter(s.name)
                            .with_unit(s.unit)
                            .with_description(s.description)
                            .build(),
                    ),
                    Kind::Gauge => Instrument::Gauge(
                        meter
                            .f64_gauge(s.name)
                            .with_unit(s.unit)
                            .with_description(s.description)
                            .build(),
                    ),
                };
                (s, i)
            })
            .collect();
        Self {
            signals,
            duration: meter
                .f64_histogram(HTTP_CLIENT_DURATION)
                .with_unit("s")
                .with_description("Duration of HTTP client requests the load generator sent.")
                .with_boundaries(HTTP_BUCKETS.to_vec())
                .build(),
            ttft: meter
                .f64_histogram(GEN_AI_TTFT)
                .with_unit("s")
                .with_description(
                    "Time to generate the first token, measured by the load generator.",
                )
                .with_boundaries(TTFT_BUCKETS.to_vec())
                .build(),
            tpot: meter
                .f64_histogram(GEN_AI_TPOT)
                .with_unit("s")
                .with_description("Time per output token after the first.")
                .with_boundaries(TPOT_BUCKETS.to_vec())
                .build(),
            tokens: meter
                .u64_histogram(GEN_AI_TOKENS)
                .with_unit("{token}")
                .with_description("Number of input and output tokens used per request.")
                .with_boundaries(TOKEN_BUCKETS.to_vec())
                .build(),
            operation: meter
                .f64_histogram(GEN_AI_OPERATION_DURATION)
                .with_unit("s")
                .with_description("GenAI operation duration.")
                .with_boundaries(GEN_AI_CLIENT_BUCKETS.to_vec())
                .build(),
            first_chunk: meter
                .f64_histogram(GEN_AI_TIME_TO_FIRST_CHUNK)
                .with_unit("s")
                .with_description(
                    "Time to receive the first chunk, from when the request was issued.",
                )
                .with_boundaries(GEN_AI_CLIENT_BUCKETS.to_vec())
                .build(),
            per_chunk: meter
                .f64_histogram(GEN_AI_TIME_PER_OUTPUT_CHUNK)
                .with_unit("s")
                .with_description(
                    "Time per output chunk, recorded for each chunk received after the first one.",
                )
                .with_boundaries(GEN_AI_CLIENT_BUCKETS.to_vec())
                .build(),
            verdicts: VerdictGauges::new(meter),
            pipeline: PipelineInstruments::new(meter),
        }
    }

    /// Records the verdict of the window just closed: one point per cause (1 for the verdict's,
    /// 0 for the others), labelled by `cause` only, so the series stay bounded; and a
    /// gateway's hops and calls per request, labelled by `inferscope.hop`.
    pub(crate) fn record_verdict(&self, v: &WindowVerdict, labels: &Labels) {
        let verdict = &v.verdict;
        // The server's identity only: one series per server and cause, whatever the phase.
        let server = Labels {
            server: labels.server.clone(),
            ..Labels::default()
        };
        let base: Vec<KeyValue> = server
            .pairs(None)
            .into_iter()
            .map(|(k, v)| KeyValue::new(k, v))
            .collect();
        for cause in Cause::ALL {
            let v = if cause == verdict.cause { 1.0 } else { 0.0 };
            let mut attrs = base.clone();
            attrs.push(KeyValue::new("cause", cause.name()));
            self.verdicts.verdict.record(v, &attrs);
        }
        self.verdicts.confidence.record(verdict.confidence, &base);
        let hop = |name: &str| {
            let mut attrs = base.clone();
            attrs.push(KeyValue::new("inferscope.hop", name.to_owned()));
            attrs
        };
        if let Some(h) = &v.hops {
            for p in &h.parts {
                self.verdicts.hop_part.record(p.part_ms, &hop(&p.hop));
                let holds = h.holder.as_deref() == Some(p.hop.as_str());
                self.verdicts
                    .hop_holds
                    .record(f64::from(u8::from(holds)), &hop(&p.hop));
            }
        }
        for c in v.orchestration.iter().flat_map(|o| &o.calls) {
            if let Some(per) = c.per_request {
                self.verdicts.hop_calls.record(per, &hop(&c.hop));
            }
        }
    }

    /// Records one closed window: counters add the window's counts, gauges take its levels.
    pub(crate) fn record_window(&self, window: &Window, labels: &Labels) {
        let base: Vec<KeyValue> = labels
            .pairs(window.phase.as_deref())
            .into_iter()
            .map(|(k, v)| KeyValue::new(k, v))
            .collect();
        for (signal, instrument) in &self.signals {
            for p in signal.points(window) {
                let mut attrs = base.clone();
                if let Some(q) = p.stat {
                    attrs.push(KeyValue::new("stat", q));
                }
                if let Some(g) = p.gpu {
                    attrs.push(KeyValue::new("gpu", i64::from(g)));
                }
                match instrument {
                    Instrument::Counter(c) => c.add(p.value, &attrs),
                    Instrument::Gauge(g) => g.record(p.value, &attrs),
                }
            }
        }
    }

    /// Records one request into the semantic-convention histograms.
    pub(crate) fn record_request(&self, req: &SampledRequest, labels: &Labels) {
        let mut attrs: Vec<KeyValue> = labels
            .pairs(None)
            .into_iter()
            .map(|(k, v)| KeyValue::new(k, v))
            .collect();
        if let Some(call) = &req.gen_ai {
            self.record_call(call, &req.itl, &attrs, req.error.as_deref());
            attrs.extend(call.attributes());
        }
        if let Some(task) = &req.pipeline {
            self.pipeline.record(task, &attrs);
        }
        if let Some(e) = &req.error {
            attrs.push(KeyValue::new("error.type", e.clone()));
        }
        self.duration.record(req.duration().as_secs_f64(), &attrs);
        // The gen_ai conventions count successful responses only.
        if req.error.is_none() {
            if let Some(t) = req.ttft {
                self.ttft.record(t.as_secs_f64(), &attrs);
            }
            if let Some(t) = req.tpot {
                self.tpot.record(t.as_secs_f64(), &attrs);
            }
        }
        for (kind, n) in [("input", req.input_tokens), ("output", req.output_tokens)] {
            if let Some(n) = n {
                let mut a = attrs.clone();
                a.push(KeyValue::new("gen_ai.token.type", kind));
                self.tokens.record(n, &a);
            }
        }
    }

    /// Records an LLM call into the generative-AI client histograms: its duration (with `error.type`
    /// when it failed), and, streamed, its first chunk and each gap between chunks (`itl`).
    fn record_call(
        &self,
        call: &GenAiCall,
        itl: &[std::time::Duration],
        labels: &[KeyValue],
        error: Option<&str>,
    ) {
        let mut attrs = labels.to_vec();
        attrs.extend(call.attributes());
        if let Some(t) = call.first_chunk {
            self.first_chunk.record(t.as_secs_f64(), &attrs);
            for gap in itl {
                self.per_chunk.record(gap.as_secs_f64(), &attrs);
            }
        }
        if let Some(e) = error {
            attrs.push(KeyValue::new("error.type", e.to_owned()));
        }
        self.operation.record(call.duration.as_secs_f64(), &attrs);
    }
}

//! Live OTLP export of a load-generator run (`stress --otlp-endpoint`, runs posted to the
//! control API): as each request finishes it goes into the `http.client.request.duration` /
//! `gen_ai.*` histograms (an LLM call into the generative-AI client ones too, with its operation,
//! model and server), and a sample of the requests leave as request spans (with the trace id
//! and span id of the request's `traceparent`, first-token and last-token events, a child span
//! per stage), labelled with the run's semantic dimensions: `scenario` (the phase's label),
//! `phase`, `endpoint` and `load_level`, the same values as the JSON report's phases.
//!
//! Records carry times relative to the run's start; the wall-clock start is estimated from
//! the records themselves (the earliest `now - end` seen, a few microseconds late at most:
//! the collector forwards a record as soon as it finishes).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::{
    GenAiCall, OtlpError, OtlpExporter, SampledRequest, Stage,
    spans::{PipelineTask, StepCount},
};
use crate::collect::catalog::Labels;
use crate::loadgen::{
    Options, Plan, Scenario,
    engine::observe,
    scenario::model::{self, Discovery},
};
use crate::measure::{Endpoint, ErrorClass, RequestRecord, record::StepOutcome};

/// Records waiting for the export task; a full queue slows the run's record collector, never
/// its requests (recording itself never blocks).
const QUEUE: usize = 4096;

/// The default share of requests exported as spans.
pub const DEFAULT_SAMPLE: f64 = 0.01;

/// Which requests become spans: an even `ratio` of them by sequence number (deterministic, so
/// a rerun samples the same requests), and every failed one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampler {
    ratio: f64,
}

impl Sampler {
    /// `ratio` of the requests, in `0..=1`.
    pub fn new(ratio: f64) -> Result<Self, OtlpError> {
        if ratio.is_finite() && (0.0..=1.0).contains(&ratio) {
            Ok(Self { ratio })
        } else {
            Err(OtlpError::Config(format!(
                "span sample ratio {ratio} is not in 0..1 (e.g. 0.01 traces one request in a hundred)"
            )))
        }
    }

    /// The ratio the standard variables ask for: `OTEL_TRACES_SAMPLER` `always_on` (1),
    /// `always_off` (0), `traceidratio` / `parentbased_traceidratio` with
    /// `OTEL_TRACES_SAMPLER_ARG`; `None` when they say nothing.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<Self>, OtlpError> {
        let Some(name) = env("OTEL_TRACES_SAMPLER").filter(|v| !v.trim().is_empty()) else {
            return Ok(None);
        };
        let ratio = match name.trim() {
            "always_on" | "parentbased_always_on" => 1.0,
            "always_off" | "parentbased_always_off" => 0.0,
            "traceidratio" | "parentbased_traceidratio" => match env("OTEL_TRACES_SAMPLER_ARG") {
                Some(arg) => arg.trim().parse::<f64>().map_err(|_| {
                    OtlpError::Config(format!(
                        "OTEL_TRACES_SAMPLER_ARG {arg:?} is not a number in 0..1"
                    ))
                })?,
                None => 1.0,
            },
            other => {
                return Err(OtlpError::Config(format!(
                    "OTEL_TRACES_SAMPLER {other:?} is not supported; use always_on, always_off or traceidratio"
                )));
            }
        };
        Self::new(ratio).map(Some)
    }

    /// The share of requests traced.
    #[must_use]
    pub fn ratio(&self) -> f64 {
        self.ratio
    }

    /// Whether request `r` becomes a span.
    #[must_use]
    pub fn keeps(&self, r: &RequestRecord) -> bool {
        // Request n is kept when the running count of kept requests steps up at n: exactly
        // `ratio` of any run of consecutive ids, evenly spread.
        let kept = |n: u64| (n as f64 * self.ratio).floor();
        r.error.is_some() || kept(r.id + 1) > kept(r.id)
    }
}

/// The labels of each phase of a scenario, by index, and what the generative-AI conventions say of
/// its LLM calls.
#[derive(Debug, Clone, PartialEq)]
pub struct RunLabels {
    phases: Vec<Labels>,
    /// Per phase, `gen_ai.operation.name` of its requests (`None`: not LLM calls).
    operations: Vec<Option<&'static str>>,
    /// Per phase, the model its requests ask for ([`RunLabels::resolve_models`]).
    models: Vec<Option<String>>,
    /// The target's host and port.
    server: Option<(String, u16)>,
}

impl RunLabels {
    /// `scenario` is the phase's label (its name when it has none), `load_level` its load's
    /// level, as in the JSON report.
    #[must_use]
    pub fn new(scenario: &Scenario) -> Self {
        let phases = scenario
            .phases
            .iter()
            .map(|p| Labels {
                scenario: Some(p.label.clone().unwrap_or_else(|| p.name.clone())),
                phase: Some(p.name.clone()),
                endpoint: None,
                load_level: Some(p.load.level()),
                server: None,
            })
            .collect();
        let operations = scenario
            .phases
            .iter()
            .map(|p| {
                // A pipeline task is several calls; a session's calls are each a chat.
                if p.request.pipeline.is_some() {
                    return None;
                }
                match p.request.endpoint.unwrap_or(Endpoint::Chat) {
                    Endpoint::Chat => Some("chat"),
                    Endpoint::Completions => Some("text_completion"),
                    Endpoint::VectorSearch | Endpoint::Http => None,
                }
            })
            .collect();
        let server = Some((scenario.target.host().to_owned(), scenario.target.port()));
        let mut labels = Self {
            phases,
            operations,
            models: Vec::new(),
            server,
        };
        labels.resolve_models(scenario, None);
        labels
    }

    /// Sets each LLM phase's model: its own, the one model discovery chose (`found`, once the
    /// run has asked), or the fallback the requests then send.
    pub fn resolve_models(&mut self, scenario: &Scenario, found: Option<&Discovery>) {
        self.models = scenario
            .phases
            .iter()
            .map(|p| model::requested_model(p, found))
            .collect();
    }

    /// Record `r` as the generative-AI conventions' LLM call; `None` when it is not one.
    #[must_use]
    pub fn call(&self, r: &RequestRecord) -> Option<GenAiCall> {
        let i = r.phase as usize;
        let operation = (*self.operations.get(i)?)?;
        let from_send = |us: u64| Duration::from_micros(us.saturating_sub(r.actual_us));
        Some(GenAiCall {
            operation,
            model: self.models.get(i).cloned().flatten(),
            server: self.server.clone(),
            duration: from_send(r.end_us),
            first_chunk: r.token_us.first().map(|&t| from_send(t)),
        })
    }

    /// The labels of record `r`: its phase's, with its endpoint.
    #[must_use]
    pub fn of(&self, r: &RequestRecord) -> Labels {
        let mut l = self
            .phases
            .get(r.phase as usize)
            .cloned()
            .unwrap_or_default();
        l.endpoint = Some(r.endpoint.label().to_owned());
        l
    }
}

/// The wall-clock instant of the run's start, estimated from records as they arrive.
#[derive(Debug, Clone, Copy, Default)]
struct Anchor(Option<SystemTime>);

impl Anchor {
    /// Takes `now - end_us` of a record that just finished; keeps the earliest estimate.
    fn update(&mut self, now: SystemTime, end_us: u64) -> SystemTime {
        let guess = now
            .checked_sub(Duration::from_micros(end_us))
            .unwrap_or(now);
        let a = self.0.map_or(guess, |a| a.min(guess));
        self.0 = Some(a);
        a
    }
}

/// `error.type` of a failed request: the HTTP status for a non-2xx answer (as the semantic
/// conventions say), the failure class otherwise. Bounded either way.
fn error_type(r: &RequestRecord) -> Option<String> {
    match (r.error?, r.status) {
        (ErrorClass::HttpStatus, Some(s)) => Some(s.to_string()),
        (class, _) => Some(class.name().to_owned()),
    }
}

/// Record `r` as the exporter takes it, with `start` the run's wall-clock start.
#[must_use]
pub fn sampled_request(r: &RequestRecord, start: SystemTime) -> SampledRequest {
    let at = |us: u64| start + Duration::from_micros(us);
    let mut stages = Vec::new();
    let mut stage = |name: &str, from: u64, to: u64| {
        if to > from {
            stages.push(Stage {
                name: name.to_owned(),
                start: at(from),
                end: at(to),
            });
        }
    };
    // Intended -> actual send: the generator's own lag (caps, busy pool).
    stage("loadgen.send_lag", r.intended_us, r.actual_us);
    if let Some(fb) = r.first_byte_us {
        stage("http.response_headers", r.actual_us, fb);
        if let Some(&first) = r.token_us.first() {
            stage("gen_ai.first_token", fb, first);
        }
    }
    if let (Some(&first), Some(&last)) = (r.token_us.first(), r.token_us.last()) {
        stage("gen_ai.decode", first, last);
    }
    // A pipeline task: one child per step, in order (`pipeline.embed`, `pipeline.search`, ...).
    for step in &r.steps {
        stage(
            &format!("pipeline.{}", step.kind.name()),
            step.start_us,
            step.end_us,
        );
    }
    let mut attributes = vec![("inferscope.request.id".to_owned(), r.id.to_string())];
    if let Some(t) = r.trace {
        attributes.push(("http.request.header.x-request-id".into(), t.request_id()));
    }
    if let Some(s) = r.status {
        attributes.push(("http.response.status_code".into(), s.to_string()));
    }
    if let Some(f) = &r.finish_reason {
        attributes.push(("gen_ai.response.finish_reasons".into(), f.clone()));
    }
    if let Some(t) = r.turn {
        attributes.push(("inferscope.turn".into(), t.to_string()));
    }
    if let Some(m) = &r.error_message {
        attributes.push(("error.message".into(), m.clone()));
    }
    SampledRequest {
        start: at(r.intended_us),
        end: at(r.end_us.max(r.intended_us)),
        ttft: r.ttft_us().map(Duration::from_micros),
        tpot: r.tpot_us().map(|us| Duration::from_secs_f64(us / 1e6)),
        input_tokens: r.input_tokens.map(u64::from),
        output_tokens: r.output_tokens.map(u64::from),
        error: error_type(r),
        stages,
        verdict: None,
        attributes,
        itl: r.itl_us().map(Duration::from_micros).collect(),
        ids: r.trace.map(|t| (t.trace_id().get(), t.span_id().get())),
        gen_ai: None,
        pipeline: (!r.steps.is_empty()).then(|| PipelineTask {
            tool_depth: r.tool_depth,
            steps: r
                .steps
                .iter()
                .map(|s| StepCount {
                    step: s.kind.name(),
                    calls: s.calls,
                    fallback: s.outcome == StepOutcome::Fallback,
                })
                .collect(),
        }),
    }
}

/// What a live export saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LiveCounts {
    /// Requests recorded into the histograms.
    pub requests: u64,
    /// Requests sent as spans.
    pub traced: u64,
}

/// A live export attached to a run; ends when the run does.
pub struct LiveExport {
    task: JoinHandle<LiveCounts>,
}

/// Attaches a live export of `plan`'s run to `opts` (beside any other watcher of its
/// records): every request into the histograms, and those `sampler` keeps as spans (none
/// without one: an explained run sends its request spans once its verdicts are known,
/// [`super::explained`]). Needs a tokio runtime.
#[must_use]
pub fn attach(
    exporter: Arc<OtlpExporter>,
    plan: &Plan,
    sampler: Option<Sampler>,
    opts: &mut Options,
) -> LiveExport {
    let mut labels = RunLabels::new(plan.scenario());
    let (tx, mut rx) = mpsc::channel::<RequestRecord>(QUEUE);
    observe::add(opts, tx);
    // The model discovery is done by the first record (the run's setup does it).
    let plan = plan.clone();
    let task = tokio::spawn(async move {
        let mut anchor = Anchor::default();
        let mut counts = LiveCounts::default();
        let mut resolved = false;
        while let Some(r) = rx.recv().await {
            if !resolved {
                labels.resolve_models(plan.scenario(), plan.models().get());
                resolved = true;
            }
            let start = anchor.update(SystemTime::now(), r.end_us);
            let mut req = sampled_request(&r, start);
            req.gen_ai = labels.call(&r);
            let l = labels.of(&r);
            exporter.record_request(&req, &l);
            counts.requests += 1;
            if sampler.is_some_and(|s| s.keeps(&r)) {
                exporter.trace_request(&req, &l);
                counts.traced += 1;
            }
        }
        counts
    });
    LiveExport { task }
}

impl LiveExport {
    /// Waits until the run's last record is exported (call after the run returned).
    pub async fn finish(self) -> LiveCounts {
        self.task.await.unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(id: u64) -> RequestRecord {
        RequestRecord::new(id, 0, Endpoint::Chat, 0)
    }

    #[test]
    fn the_sampler_keeps_an_even_share_and_every_failure() {
        let s = Sampler::new(0.1).unwrap();
        let kept = (0..1000).filter(|&i| s.keeps(&rec(i))).count();
        assert_eq!(kept, 100);
        // Evenly spread: one in every ten consecutive ids.
        assert_eq!((0..10).filter(|&i| s.keeps(&rec(i))).count(), 1);
        assert_eq!(
            (0..100)
                .filter(|&i| Sampler::new(1.0).unwrap().keeps(&rec(i)))
                .count(),
            100
        );
        let none = Sampler::new(0.0).unwrap();
        assert!(!(0..100).any(|i| none.keeps(&rec(i))));
        let mut failed = rec(3);
        failed.fail(ErrorClass::Timeout, "timed out");
        assert!(none.keeps(&failed));
    }

    #[test]
    fn bad_ratios_and_samplers_are_config_errors() {
        for r in [-0.1, 1.5, f64::NAN] {
            assert!(Sampler::new(r).is_err(), "{r}");
        }
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        assert_eq!(Sampler::from_env(&env(&[])).unwrap(), None);
        let r = |p| Sampler::from_env(&env(p)).unwrap().unwrap().ratio();
        assert!((r(&[("OTEL_TRACES_SAMPLER", "always_on")]) - 1.0).abs() < 1e-12);
        assert!(r(&[("OTEL_TRACES_SAMPLER", "always_off")]).abs() < 1e-12);
        assert!(
            (r(&[
                ("OTEL_TRACES_SAMPLER", "traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", "0.25")
            ]) - 0.25)
                .abs()
                < 1e-12
        );
        let e = Sampler::from_env(&env(&[("OTEL_TRACES_SAMPLER", "jaeger_remote")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("use always_on"), "{e}");
        assert!(
            Sampler::from_env(&env(&[
                ("OTEL_TRACES_SAMPLER", "traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", "lots")
            ]))
            .is_err()
        );
    }

    #[test]
    fn a_record_becomes_a_request_with_its_stages_and_gaps() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut r = rec(7);
        r.intended_us = 1_000;
        r.actual_us = 1_500;
        r.first_byte_us = Some(2_000);
        r.token_us = vec![11_000, 13_000, 17_000];
        r.end_us = 17_000;
        r.output_tokens = Some(3);
        r.input_tokens = Some(10);
        r.status = Some(200);
        let q = sampled_request(&r, t0);
        assert_eq!(q.start, t0 + Duration::from_millis(1));
        assert_eq!(q.duration(), Duration::from_millis(16));
        assert_eq!(q.ttft, Some(Duration::from_millis(10)));
        assert_eq!(q.tpot, Some(Duration::from_millis(3)));
        assert_eq!(q.itl, [Duration::from_millis(2), Duration::from_millis(4)]);
        let names: Vec<&str> = q.stages.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "loadgen.send_lag",
                "http.response_headers",
                "gen_ai.first_token",
                "gen_ai.decode"
            ]
        );
        assert_eq!(q.error, None);
        // A non-2xx answer is typed by its status, other failures by their class.
        r.fail(ErrorClass::HttpStatus, "503");
        r.status = Some(503);
        assert_eq!(sampled_request(&r, t0).error.as_deref(), Some("503"));
        r.fail(ErrorClass::Connect, "refused");
        r.status = None;
        assert_eq!(sampled_request(&r, t0).error.as_deref(), Some("connect"));
    }

    #[test]
    fn a_pipeline_task_has_a_child_per_step() {
        use crate::measure::record::{StepKind, StepOutcome, StepRecord};
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(100);
        let mut r = RequestRecord::new(1, 0, Endpoint::Chat, 1_000);
        r.end_us = 9_000;
        let step = |kind, start_us, end_us| StepRecord {
            kind,
            start_us,
            end_us,
            outcome: StepOutcome::Ok,
            calls: 1,
            error: None,
            error_message: None,
            ttft_us: None,
        };
        r.steps = vec![
            step(StepKind::Embed, 1_000, 2_000),
            step(StepKind::Search, 2_000, 5_000),
            step(StepKind::Chat, 5_000, 9_000),
        ];
        let stages: Vec<(String, Duration)> = sampled_request(&r, t0)
            .stages
            .iter()
            .filter(|s| s.name.starts_with("pipeline."))
            .map(|s| (s.name.clone(), s.end.duration_since(s.start).unwrap()))
            .collect();
        assert_eq!(
            stages,
            [
                ("pipeline.embed".to_owned(), Duration::from_millis(1)),
                ("pipeline.search".to_owned(), Duration::from_millis(3)),
                ("pipeline.chat".to_owned(), Duration::from_millis(4)),
            ]
        );
    }

    #[test]
    fn an_llm_record_is_a_gen_ai_call_timed_from_its_send_with_its_own_ids() {
        use crate::measure::trace_context::{TraceContext, TraceId};
        let plan = Plan::from_yaml(
            "name: t\ntarget: http://127.0.0.1:8000\nphases:\n  - name: c\n    duration: 1s\n    load: {shape: constant, rate: 5}\n    request: {endpoint: completions, model: m}\n  - name: d\n    duration: 1s\n    load: {shape: constant, rate: 5}\n  - name: h\n    duration: 1s\n    load: {shape: constant, rate: 5}\n    request: {endpoint: http, path: /}\n",
            "t.yaml",
            std::path::Path::new("."),
        )
        .unwrap();
        let mut labels = RunLabels::new(plan.scenario());
        let mut rec = RequestRecord::new(1, 0, Endpoint::Completions, 1_000);
        rec.actual_us = 3_000;
        rec.token_us = vec![8_000, 9_000];
        rec.end_us = 10_000;
        let call = labels.call(&rec).unwrap();
        assert_eq!(call.operation, "text_completion");
        assert_eq!(call.model.as_deref(), Some("m"));
        assert_eq!(call.server, Some(("127.0.0.1".to_owned(), 8000)));
        assert_eq!(call.duration, Duration::from_millis(7));
        assert_eq!(call.first_chunk, Some(Duration::from_millis(5)));
        // A whole answer has no chunks; a phase without a model asks discovery's.
        rec.phase = 1;
        rec.endpoint = Endpoint::Chat;
        rec.token_us.clear();
        let call = labels.call(&rec).unwrap();
        assert_eq!((call.operation, call.first_chunk), ("chat", None));
        assert_eq!(call.model.as_deref(), Some(model::FALLBACK_MODEL));
        let chosen = Discovery::Chosen {
            model: "served".into(),
            served: 1,
            url: "u".into(),
            owned_by: None,
        };
        labels.resolve_models(plan.scenario(), Some(&chosen));
        assert_eq!(labels.call(&rec).unwrap().model.as_deref(), Some("served"));
        rec.phase = 2;
        rec.endpoint = Endpoint::Http;
        assert_eq!(labels.call(&rec), None);

        let trace = TraceContext::new_span(TraceId::random());
        rec.trace = Some(trace);
        let req = sampled_request(&rec, SystemTime::UNIX_EPOCH);
        assert_eq!(
            req.ids,
            Some((trace.trace_id().get(), trace.span_id().get()))
        );
        assert!(req.attributes.contains(&(
            "http.request.header.x-request-id".into(),
            trace.request_id()
        )));
    }

    #[test]
    fn the_anchor_keeps_the_earliest_estimate() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(100);
        let mut a = Anchor::default();
        assert_eq!(a.update(t, 2_000_000), t - Duration::from_secs(2));
        // A record forwarded late gives a later guess; the earlier one stands.
        assert_eq!(
            a.update(t + Duration::from_secs(1), 2_500_000),
            t - Duration::from_secs(2)
        );
        assert_eq!(
            a.update(t + Duration::from_secs(1), 3_200_000),
            t - Duration::from_millis(2_200)
        );
    }

    #[test]
    fn labels_name_the_phase_its_label_level_and_endpoint() {
        let s = Plan::from_yaml(
            "name: t\ntarget: http://127.0.0.1:1\nphases:\n  - name: warm\n    duration: 1s\n    load: {shape: constant, rate: 5}\n  - name: peak\n    label: burst\n    duration: 1s\n    load: {shape: concurrency, users: 4}\n    request: {endpoint: vector_search, dimensions: 8}\n",
            "t.yaml",
            std::path::Path::new("."),
        )
        .unwrap();
        let l = RunLabels::new(s.scenario());
        let mut r = RequestRecord::new(1, 1, Endpoint::VectorSearch, 0);
        assert_eq!(
            l.of(&r).pairs(None),
            [
                ("scenario", "burst".to_owned()),
                ("phase", "peak".to_owned()),
                ("endpoint", "vector_search".to_owned()),
                ("load_level", "concurrency=4".to_owned()),
            ]
        );
        r.phase = 0;
        r.endpoint = Endpoint::Chat;
        let p = l.of(&r).pairs(None);
        assert_eq!(p[0], ("scenario", "warm".to_owned()));
        assert_eq!(p[3], ("load_level", "rate=5/s".to_owned()));
    }
}

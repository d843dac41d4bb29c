//! Live OTLP from `inferscope stress`: a two-phase run against `inferscope sim` exports every
//! request into the `http.client.*` / `gen_ai.*` histograms (the generative-AI client metrics with
//! their operation, provider, model and server) and sampled request spans (with the ids the
//! requests' `traceparent` carried), labelled `scenario`, `phase`, `endpoint` and
//! `load_level`, to the collector test double, the run's provenance on the resource; the
//! numbers match the run's own JSON report. Loopback only; no root needed.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    fmt::Write as _,
    path::Path,
};

use inferscope::measure::report::StressReport;
use opentelemetry_proto::tonic::metrics::v1::{HistogramDataPoint, Metric, metric};
use opentelemetry_proto::tonic::trace::v1::Span;

use crate::otlp_collector_double::{CollectorDouble, attrs};
use crate::sim_process::SimProcess;

const SCENARIO: &str = "\
name: live
target: TARGET
timeout: 10s
phases:
  - name: warm
    label: baseline
    duration: 2s
    load: {shape: constant, rate: 10}
    request: {endpoint: chat, max_tokens: 8}
  - name: peak
    label: burst
    duration: 1s
    load: {shape: concurrency, users: 2}
    request: {endpoint: completions, max_tokens: 8}
";

/// The sim with fixed, fast timing.
fn sim() -> SimProcess {
    SimProcess::start(["--corpus-size", "50", "--ttft-ms", "5", "--itl-ms", "2"])
}

/// `inferscope stress` with `args` and `env`, writing its report under `dir`: (exit code,
/// stderr, report).
fn stress(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, StressReport) {
    let out_path = dir.join("report.json");
    let _ = std::fs::remove_file(&out_path);
    let mut cmd = crate::cli::inferscope();
    cmd.arg("stress")
        .args(args)
        .args(["--quiet", "--out"])
        .arg(&out_path)
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_TRACES_SAMPLER")
        .env_remove("OTEL_TRACES_SAMPLER_ARG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    crate::cli::stress_report(&mut cmd, &out_path)
}

fn histogram<'a>(metrics: &'a HashMap<String, Metric>, name: &str) -> &'a [HistogramDataPoint] {
    let m = metrics
        .get(name)
        .unwrap_or_else(|| panic!("no metric {name} in {:?}", metrics.keys()));
    let Some(metric::Data::Histogram(h)) = &m.data else {
        panic!("{name} is not a histogram")
    };
    &h.data_points
}

/// Counts of a histogram by (`scenario`, `phase`, `endpoint`, `load_level`), the other attributes
/// (`error.type`, `gen_ai.token.type`) summed over.
fn by_labels(points: &[HistogramDataPoint]) -> BTreeMap<[String; 4], u64> {
    let mut out = BTreeMap::new();
    for p in points {
        let a = attrs(&p.attributes);
        let key = ["scenario", "phase", "endpoint", "load_level"].map(|k| {
            a.get(k)
                .unwrap_or_else(|| panic!("no {k} label on {a:?}"))
                .clone()
        });
        *out.entry(key).or_default() += p.count;
    }
    out
}

fn labels(s: &str, p: &str, e: &str, l: &str) -> [String; 4] {
    [s, p, e, l].map(str::to_owned)
}

fn request_spans(collector: &CollectorDouble) -> Vec<Span> {
    collector
        .spans()
        .into_iter()
        .filter(|s| s.name == "inferscope.request")
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stress_exports_labelled_histograms_and_spans_live() {
    let collector = CollectorDouble::default();
    let endpoint = collector.serve_http().await;
    let sim = sim();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("live.yaml");
    std::fs::write(&file, SCENARIO.replace("TARGET", &sim.url)).unwrap();
    let d = dir.path().to_owned();
    let text = SCENARIO.replace("TARGET", &sim.url);
    let (code, err, report) = tokio::task::spawn_blocking(move || {
        stress(
            &d,
            &[
                file.to_str().unwrap(),
                "--otlp-endpoint",
                &endpoint,
                "--otlp-sample",
                "1",
                "--seed",
                "42",
            ],
            &[],
        )
    })
    .await
    .unwrap();
    assert_eq!(code, Some(0), "{err}");
    check_provenance(&collector, &report, &text);
    let (warm, peak) = (&report.phases[0], &report.phases[1]);
    let finished = warm.counts.finished + peak.counts.finished;
    assert!(warm.counts.finished >= 15, "{:?}", warm.counts);
    assert!(peak.counts.finished >= 2, "{:?}", peak.counts);
    assert!(
        err.contains(&format!(
            "OTLP: {finished} requests recorded, {finished} traced; {finished} spans delivered"
        )) || err.contains(&format!(
            "OTLP: {finished} requests recorded, {finished} traced;"
        )),
        "{err}"
    );

    // Every request in the duration histogram, under its phase's labels (the report's own).
    let metrics = collector.metrics();
    let expect = BTreeMap::from([
        (
            labels("baseline", "warm", "chat", &warm.load_level),
            warm.counts.finished,
        ),
        (
            labels("burst", "peak", "completions", &peak.load_level),
            peak.counts.finished,
        ),
    ]);
    assert_eq!(warm.load_level, "rate=10/s");
    assert_eq!(peak.load_level, "concurrency=2");
    assert_eq!(
        by_labels(histogram(&metrics, "http.client.request.duration")),
        expect
    );
    // TTFT of every successful request, in seconds: the sim's 5 ms first token.
    let ttft = histogram(&metrics, "gen_ai.server.time_to_first_token");
    let ok = BTreeMap::from([
        (
            labels("baseline", "warm", "chat", "rate=10/s"),
            warm.counts.ok,
        ),
        (
            labels("burst", "peak", "completions", "concurrency=2"),
            peak.counts.ok,
        ),
    ]);
    assert_eq!(by_labels(ttft), ok);
    for p in ttft {
        let mean = p.sum.unwrap() / p.count as f64;
        assert!((0.004..0.5).contains(&mean), "mean TTFT {mean} s");
    }
    assert!(metrics.contains_key("gen_ai.server.time_per_output_token"));
    let tokens = histogram(&metrics, "gen_ai.client.token.usage");
    let output: f64 = tokens
        .iter()
        .filter(|p| attrs(&p.attributes)["gen_ai.token.type"] == "output")
        .map(|p| p.sum.unwrap())
        .sum();
    assert_eq!(output as u64, warm.output_tokens + peak.output_tokens);
    check_gen_ai_client(&metrics, &report);

    check_spans(&collector, &report, finished);
}

/// The generative-AI client metrics: every call's duration, every streamed one's first chunk and each
/// gap after it, with the conventions' attributes.
fn check_gen_ai_client(metrics: &HashMap<String, Metric>, report: &StressReport) {
    let (warm, peak) = (&report.phases[0], &report.phases[1]);
    let duration = histogram(metrics, "gen_ai.client.operation.duration");
    assert_eq!(
        by_labels(duration),
        BTreeMap::from([
            (
                labels("baseline", "warm", "chat", "rate=10/s"),
                warm.counts.finished
            ),
            (
                labels("burst", "peak", "completions", "concurrency=2"),
                peak.counts.finished
            ),
        ])
    );
    let port = report.target.rsplit(':').next().unwrap().to_owned();
    for p in duration {
        let a = attrs(&p.attributes);
        let op = if a["phase"] == "warm" {
            "chat"
        } else {
            "text_completion"
        };
        assert_eq!(a["gen_ai.operation.name"], op, "{a:?}");
        assert_eq!(a["gen_ai.provider.name"], "openai");
        assert_eq!(a["gen_ai.request.model"], "inferscope-sim");
        assert_eq!(a["server.address"], "127.0.0.1");
        assert_eq!(a["server.port"], port);
    }
    // Streamed answers (the default): a first chunk per successful call and one gap per chunk
    // after it, in seconds; the sim sends a chunk every 2 ms.
    let first = histogram(metrics, "gen_ai.client.operation.time_to_first_chunk");
    let first_count: u64 = first.iter().map(|p| p.count).sum();
    let streamed = report
        .records
        .iter()
        .filter(|r| !r.token_us.is_empty())
        .count() as u64;
    assert_eq!(first_count, streamed);
    let gaps: u64 = report
        .records
        .iter()
        .map(|r| r.token_us.len().saturating_sub(1) as u64)
        .sum();
    let per_chunk = histogram(metrics, "gen_ai.client.operation.time_per_output_chunk");
    assert_eq!(per_chunk.iter().map(|p| p.count).sum::<u64>(), gaps);
    let mean = per_chunk.iter().map(|p| p.sum.unwrap()).sum::<f64>() / gaps as f64;
    assert!((0.0005..0.1).contains(&mean), "mean gap {mean} s");
    let tokens = histogram(metrics, "gen_ai.client.token.usage");
    assert!(
        tokens
            .iter()
            .all(|p| attrs(&p.attributes)["gen_ai.provider.name"] == "openai")
    );
}

/// The run's provenance in its report and on the OTLP resource: the sim says what it is, the
/// seed is `--seed`'s, the scenario's hash is of the file's text.
fn check_provenance(collector: &CollectorDouble, report: &StressReport, text: &str) {
    let run = report.run.as_ref().expect("the report's run");
    let engine = run.engine.as_ref().expect("the engine");
    assert_eq!(engine.name, "inferscope-sim");
    assert_eq!(engine.version.as_deref(), Some(env!("CARGO_PKG_VERSION")));
    assert_eq!(engine.from, "/v1/models");
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    let sha: String = digest.as_ref().iter().fold(String::new(), |mut hex, b| {
        let _ = write!(hex, "{b:02x}");
        hex
    });
    assert_eq!(run.scenario_sha256.as_deref(), Some(sha.as_str()));
    assert_eq!(run.seed, Some(42));
    assert!(run.cpu.as_ref().unwrap().cores >= 1);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_eq!(run.kernel.as_deref(), Some(kernel.trim()));
    let r = collector.resource();
    assert_eq!(r["inferscope.engine.name"], "inferscope-sim");
    assert_eq!(r["inferscope.engine.version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(r["inferscope.scenario.sha256"], sha);
    assert_eq!(r["inferscope.seed"], "42");
    assert_eq!(r["os.version"], kernel.trim());
    assert_eq!(r["inferscope.trace_id"], run.trace_id.unwrap().to_string());
}

/// `--otlp-sample 1`: one span per request, labelled, at the request's wall-clock time, with
/// its first and last token and the stages in between.
fn check_spans(collector: &CollectorDouble, report: &StressReport, finished: u64) {
    let spans = request_spans(collector);
    assert_eq!(spans.len() as u64, finished);
    let records: HashMap<String, _> = report
        .records
        .iter()
        .map(|r| (r.id.to_string(), r))
        .collect();
    let mut phases = BTreeSet::new();
    for s in &spans {
        let a = attrs(&s.attributes);
        phases.insert((
            a["scenario"].clone(),
            a["phase"].clone(),
            a["endpoint"].clone(),
        ));
        let r = records[&a["inferscope.request.id"]];
        // The span is the request as it went out: its traceparent's ids.
        let t = r.trace.unwrap();
        assert_eq!(s.trace_id, t.trace_id().get().to_be_bytes());
        assert_eq!(s.span_id, t.span_id().get().to_be_bytes());
        assert_eq!(a["http.request.header.x-request-id"], t.request_id());
        let want = report.started_unix_ns + r.intended_us * 1000;
        let off_ms = (s.start_time_unix_nano as i64 - want as i64).abs() / 1_000_000;
        assert!(off_ms < 50, "span starts {off_ms} ms off its request");
        assert_eq!(
            s.end_time_unix_nano - s.start_time_unix_nano,
            r.e2e_us() * 1000
        );
        let events: Vec<&str> = s.events.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(events, ["first_token", "last_token"], "{a:?}");
        assert_eq!(
            s.events[0].time_unix_nano - s.start_time_unix_nano,
            r.ttft_us().unwrap() * 1000
        );
        let itl = attrs(&s.events[1].attributes);
        assert_eq!(itl["gen_ai.itl.count"], (r.token_us.len() - 1).to_string());
        let children: BTreeSet<String> = collector
            .spans()
            .iter()
            .filter(|c| c.parent_span_id == s.span_id)
            .map(|c| c.name.clone())
            .collect();
        assert!(children.contains("gen_ai.decode"), "{children:?}");
    }
    assert_eq!(
        phases,
        BTreeSet::from([
            ("baseline".into(), "warm".into(), "chat".into()),
            ("burst".into(), "peak".into(), "completions".into()),
        ])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standard_environment_turns_it_on_and_samples() {
    let collector = CollectorDouble::default();
    let endpoint = collector.serve_grpc();
    let sim = sim();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_owned();
    let (code, err, report) = tokio::task::spawn_blocking(move || {
        stress(
            &d,
            &[
                "--target",
                &sim.url,
                "--rate",
                "20",
                "--duration",
                "2s",
                "--no-trace-headers",
            ],
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ("OTEL_TRACES_SAMPLER", "traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", "0.1"),
            ],
        )
    })
    .await
    .unwrap();
    assert_eq!(code, Some(0), "{err}");
    let finished = report.phases[0].counts.finished;
    assert!(finished >= 30, "{:?}", report.phases[0].counts);
    let metrics = collector.metrics();
    let points = by_labels(histogram(&metrics, "http.client.request.duration"));
    assert_eq!(
        points,
        BTreeMap::from([(labels("main", "main", "chat", "rate=20/s"), finished)])
    );
    // One in ten, by sequence number.
    let spans = request_spans(&collector);
    let want = (finished as f64 * 0.1).floor() as usize;
    assert_eq!(spans.len(), want, "{finished} requests");
    // --no-trace-headers: no request carried a trace context; a run from flags has no
    // scenario text to hash.
    assert!(report.records.iter().all(|r| r.trace.is_none()));
    let run = report.run.unwrap();
    assert_eq!((run.trace_id, run.scenario_sha256), (None, None));
    assert!(!collector.resource().contains_key("inferscope.trace_id"));
}

#[test]
fn bad_otlp_flags_are_one_line_errors() {
    let otlp = ["--otlp-endpoint", "http://127.0.0.1:1"];
    let run = ["--rate", "1", "--duration", "1s"];
    for (args, says) in [
        (
            [&otlp[..], &run, &["--otlp-sample", "2"]].concat(),
            "--otlp-sample",
        ),
        (
            [&run[..], &["--otlp-sample", "0.5"]].concat(),
            "needs an OTLP export",
        ),
        (
            [&otlp[..], &["--find-max", "ttft_p95 < 1s"]].concat(),
            "--find-max runs are not exported",
        ),
        (
            [&otlp[..], &run, &["--otlp-protocol", "carrier-pigeon"]].concat(),
            "use grpc or http/protobuf",
        ),
    ] {
        let out = crate::cli::inferscope()
            .args(["stress", "--target", "http://127.0.0.1:1"])
            .args(&args)
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

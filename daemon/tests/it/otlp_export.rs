//! OTLP export end to end against a test double for an OpenTelemetry collector, built on the
//! official protobuf definitions (`opentelemetry-proto`): gRPC and HTTP/protobuf receivers on
//! 127.0.0.1 record what arrives. (The export with the collector down is `otlp_memory`, a
//! binary of its own: it measures the process's memory.)
//! No root needed.

use crate::{otlp_collector_double, otlp_fixtures::*};

use std::collections::HashMap;

use inferscope::attribute::{
    Cause, Verdict, WindowVerdict,
    hops::{HopCalls, Orchestration},
};
use inferscope::collect::catalog::{Labels, SIGNALS};
use inferscope::collect::identity::{K8sIdentity, ServerIdentity};
use inferscope::export::otlp::{ExportStats, OtlpConfig, OtlpExporter, Protocol};
use opentelemetry_proto::tonic::metrics::v1::{Metric, metric};
use opentelemetry_proto::tonic::trace::v1::{Span, span};
use otlp_collector_double::{CollectorDouble, TLS_DIR, attrs};

/// Feeds three windows and five requests, shuts down, returns the stats.
async fn run(config: OtlpConfig) -> ExportStats {
    let exporter = OtlpExporter::start(&config, &resource()).unwrap();
    for i in 0..3 {
        exporter.record_window(&window(i), &labels());
    }
    // A server in a pod: its verdict carries its identity.
    exporter.record_verdict(&kv_verdict(), &Labels::of_server(&pod_server()));
    for i in 0..5 {
        exporter.record_request(&request(i), &labels());
        exporter.trace_request(&request(i), &labels());
    }
    tokio::task::spawn_blocking(move || exporter.shutdown())
        .await
        .unwrap()
        .unwrap()
}

fn check_received(collector: &CollectorDouble, stats: ExportStats) {
    assert_eq!(stats.spans_submitted, 25, "{stats:?}");
    assert_eq!(stats.spans_exported, 25, "{stats:?}");
    assert_eq!(stats.spans_dropped(), 0, "{stats:?}");
    assert!(stats.metric_exports_ok >= 1, "{stats:?}");

    let res = collector.resource();
    assert_eq!(res["service.name"], "inferscope");
    assert_eq!(res["k8s.pod.name"], "inferscope-abcde");
    assert_eq!(res["host.name"], "node-1");
    assert!(
        collector
            .headers
            .lock()
            .unwrap()
            .contains(&("x-tenant".into(), "team-a".into()))
    );

    check_metrics(&collector.metrics());
    check_spans(&collector.spans());
}

fn pod_server() -> ServerIdentity {
    ServerIdentity {
        server: "pod:6a1f0c2e-3b4d-4e5f-8a9b-0c1d2e3f4a5b".into(),
        process: Some("vllm".into()),
        k8s: Some(K8sIdentity {
            pod_uid: "6a1f0c2e-3b4d-4e5f-8a9b-0c1d2e3f4a5b".into(),
            pod_name: Some("vllm-0".into()),
            namespace: Some("llm".into()),
            container_name: Some("vllm".into()),
            container_id: "5e4d".into(),
        }),
    }
}

/// A gateway's window judged `kv_cache`, with the calls it made per request to its chat hop.
fn kv_verdict() -> WindowVerdict {
    WindowVerdict {
        index: 0,
        start_unix_ms: 0,
        phase: None,
        verdict: Verdict::bare(Cause::KvCache, 0.7),
        hops: None,
        orchestration: Some(Orchestration {
            requests: 4,
            calls: vec![HopCalls {
                hop: "port:8001".into(),
                calls: 8,
                per_request: Some(2.0),
            }],
        }),
    }
}

/// The verdict of [`pod_server`]: `server` and the `k8s.*` attributes with each cause.
fn check_verdict(metrics: &HashMap<String, Metric>) {
    let Some(metric::Data::Gauge(g)) = &metrics["inferscope.verdict"].data else {
        panic!("the verdict is not a gauge")
    };
    let kv = g
        .data_points
        .iter()
        .find(|p| attrs(&p.attributes)["cause"] == "kv_cache")
        .unwrap();
    let a = attrs(&kv.attributes);
    assert_eq!(a["server"], "pod:6a1f0c2e-3b4d-4e5f-8a9b-0c1d2e3f4a5b");
    assert_eq!(a["k8s.pod.name"], "vllm-0");
    assert_eq!(a["k8s.namespace.name"], "llm");
    assert_eq!(a["k8s.container.name"], "vllm");
    assert_eq!(
        kv.value,
        Some(opentelemetry_proto::tonic::metrics::v1::number_data_point::Value::AsDouble(1.0))
    );
    assert_eq!(g.data_points.len(), Cause::ALL.len());
    let Some(metric::Data::Gauge(g)) = &metrics["inferscope.hop.calls_per_request"].data else {
        panic!("the calls per request are not a gauge")
    };
    let a = attrs(&g.data_points[0].attributes);
    assert_eq!(a["inferscope.hop"], "port:8001");
    assert_eq!(a["k8s.pod.name"], "vllm-0");
    assert_eq!(
        g.data_points[0].value,
        Some(opentelemetry_proto::tonic::metrics::v1::number_data_point::Value::AsDouble(2.0))
    );
}

/// The five requests' orchestration: a tool-call depth of 4 each, and by step their calls
/// and the search step's fallbacks.
fn check_pipeline(metrics: &HashMap<String, Metric>) {
    use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value;
    let Some(metric::Data::Histogram(h)) = &metrics["inferscope.pipeline.tool_depth"].data else {
        panic!("the tool-call depth is not a histogram")
    };
    assert_eq!(h.data_points[0].count, 5);
    assert_eq!(h.data_points[0].sum, Some(20.0));
    let by_step = |name: &str| -> HashMap<String, Option<Value>> {
        let Some(metric::Data::Sum(sum)) = &metrics[name].data else {
            panic!("{name} is not a sum")
        };
        sum.data_points
            .iter()
            .map(|p| (attrs(&p.attributes)["inferscope.step"].clone(), p.value))
            .collect()
    };
    let calls = by_step("inferscope.pipeline.step.calls");
    assert_eq!(calls["search"], Some(Value::AsInt(5)));
    assert_eq!(calls["tools"], Some(Value::AsInt(25)));
    let fallbacks = by_step("inferscope.pipeline.step.fallbacks");
    assert_eq!(fallbacks["search"], Some(Value::AsInt(5)));
    assert!(!fallbacks.contains_key("tools"), "{fallbacks:?}");
}

/// Names, units, attributes and values of the metrics of [`run`].
fn check_metrics(metrics: &HashMap<String, Metric>) {
    check_verdict(metrics);
    for s in SIGNALS {
        let m = metrics
            .get(s.name)
            .unwrap_or_else(|| panic!("no metric {}", s.name));
        assert_eq!(m.unit, s.unit, "{}", s.name);
        assert_eq!(m.description, s.description, "{}", s.name);
    }
    // Counter: the sum over the three windows, with the bounded labels.
    let Some(metric::Data::Sum(sum)) = &metrics["inferscope.load.requests"].data else {
        panic!("requests is not a sum")
    };
    assert!(sum.is_monotonic);
    assert_eq!(sum.data_points.len(), 1);
    let p = &sum.data_points[0];
    assert_eq!(
        attrs(&p.attributes),
        HashMap::from([
            ("scenario".into(), "burst".into()),
            ("phase".into(), "peak".into()),
            ("endpoint".into(), "chat".into()),
            ("load_level".into(), "c32".into()),
        ])
    );
    assert_eq!(
        p.value,
        Some(opentelemetry_proto::tonic::metrics::v1::number_data_point::Value::AsDouble(33.0))
    );
    // Gauge: quantiles in seconds.
    let Some(metric::Data::Gauge(g)) = &metrics["inferscope.load.time_to_first_token"].data else {
        panic!("ttft is not a gauge")
    };
    let p95 = g
        .data_points
        .iter()
        .find(|p| attrs(&p.attributes)["stat"] == "p95")
        .unwrap();
    assert_eq!(
        p95.value,
        Some(opentelemetry_proto::tonic::metrics::v1::number_data_point::Value::AsDouble(0.2))
    );
    // Semantic-convention histograms from the requests.
    let Some(metric::Data::Histogram(h)) = &metrics["http.client.request.duration"].data else {
        panic!("duration is not a histogram")
    };
    assert_eq!(metrics["http.client.request.duration"].unit, "s");
    assert_eq!(h.data_points[0].count, 5);
    assert!((h.data_points[0].sum.unwrap() - 4.5).abs() < 1e-9);
    let Some(metric::Data::Histogram(t)) = &metrics["gen_ai.client.token.usage"].data else {
        panic!("token usage is not a histogram")
    };
    let mut kinds: Vec<String> = t
        .data_points
        .iter()
        .map(|p| attrs(&p.attributes)["gen_ai.token.type"].clone())
        .collect();
    kinds.sort();
    assert_eq!(kinds, ["input", "output"]);
    assert!(metrics.contains_key("gen_ai.server.time_to_first_token"));
    check_pipeline(metrics);
    // No per-request attribute leaked onto any metric.
    for m in metrics.values() {
        let debug = format!("{m:?}");
        assert!(
            !debug.contains("req-"),
            "{} carries a per-request attribute",
            m.name
        );
    }
}

/// The request spans of [`run`] and their waterfall children.
fn check_spans(spans: &[Span]) {
    let parents: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name == "inferscope.request")
        .collect();
    assert_eq!(parents.len(), 5);
    for p in &parents {
        assert_eq!(p.kind, span::SpanKind::Client as i32);
        let a = attrs(&p.attributes);
        assert_eq!(a["inferscope.verdict"], "kv_cache");
        assert_eq!(a["scenario"], "burst");
        assert_eq!(a["gen_ai.usage.output_tokens"], "40");
        assert!(a["inferscope.request.id"].starts_with("req-"));
        assert_eq!(p.end_time_unix_nano - p.start_time_unix_nano, 900_000_000);
        assert_eq!(p.events.len(), 1);
        assert_eq!(p.events[0].name, "first_token");
        assert_eq!(
            p.events[0].time_unix_nano - p.start_time_unix_nano,
            120_000_000
        );
        let children: Vec<&Span> = spans
            .iter()
            .filter(|s| s.parent_span_id == p.span_id)
            .collect();
        let mut names: Vec<&str> = children.iter().map(|s| s.name.as_str()).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            ["gpu_sync", "queue", "runq_delay", "server_first_byte"]
        );
        assert!(children.iter().all(|s| s.trace_id == p.trace_id));
        let gpu = children.iter().find(|s| s.name == "gpu_sync").unwrap();
        assert_eq!(
            gpu.start_time_unix_nano - p.start_time_unix_nano,
            40_000_000
        );
        assert_eq!(
            gpu.end_time_unix_nano - gpu.start_time_unix_nano,
            60_000_000
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_export_reaches_the_collector_double() {
    let collector = CollectorDouble::default();
    let endpoint = collector.serve_grpc();
    let stats = run(config(&endpoint, Protocol::Grpc)).await;
    check_received(&collector, stats);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_protobuf_export_reaches_the_collector_double() {
    let collector = CollectorDouble::default();
    let base = collector.serve_http().await;
    let stats = run(config(&base, Protocol::HttpProtobuf)).await;
    check_received(&collector, stats);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_is_verified_a_collector_with_an_unknown_ca_gets_nothing() {
    let untrusted = CollectorDouble::default();
    let endpoint = untrusted.serve_grpc_tls().await;
    let stats = run(config(&endpoint, Protocol::Grpc)).await;
    assert_eq!(stats.spans_exported, 0, "{stats:?}");
    assert_eq!(stats.spans_dropped(), 25, "{stats:?}");
    assert_eq!(stats.metric_exports_ok, 0, "{stats:?}");
    assert!(untrusted.spans().is_empty());
    assert!(untrusted.metrics.lock().unwrap().is_empty());

    // The same collector, its CA given (OTEL_EXPORTER_OTLP_CERTIFICATE / --otlp-ca-file).
    let trusted = CollectorDouble::default();
    let endpoint = trusted.serve_grpc_tls().await;
    let mut cfg = config(&endpoint, Protocol::Grpc);
    cfg.ca_file = Some(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/otlp-tls/ca.pem"
        )
        .into(),
    );
    let stats = run(cfg).await;
    check_received(&trusted, stats);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_protobuf_is_verified_too() {
    let untrusted = CollectorDouble::default();
    let endpoint = untrusted.serve_https().await;
    let stats = run(config(&endpoint, Protocol::HttpProtobuf)).await;
    assert_eq!(stats.spans_exported, 0, "{stats:?}");
    assert_eq!(stats.spans_dropped(), 25, "{stats:?}");
    assert!(untrusted.spans().is_empty());

    let trusted = CollectorDouble::default();
    let endpoint = trusted.serve_https().await;
    let mut cfg = config(&endpoint, Protocol::HttpProtobuf);
    cfg.ca_file = Some(format!("{TLS_DIR}/ca.pem").into());
    let stats = run(cfg).await;
    check_received(&trusted, stats);
}

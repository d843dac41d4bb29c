//! OTLP export end to end against a test double for an OpenTelemetry collector, built on the
//! official protobuf definitions (`opentelemetry-proto`): gRPC and HTTP/protobuf receivers on
//! 127.0.0.1 record what arrives. A third run exports with the collector down.
//! No root needed.

use crate::otlp_collector_double;

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use inferscope::collect::timeline::{
    GpuSignals, LoadSignals, NetSignals, Quantiles, RunqSignals, ServerSignals, Window,
};
use inferscope::export::otlp::{
    ExportStats, OtlpConfig, OtlpExporter, OtlpOptions, Protocol, SampledRequest, Stage,
};
use inferscope::export::signals::{Labels, SIGNALS};
use opentelemetry_proto::tonic::metrics::v1::{Metric, metric};
use opentelemetry_proto::tonic::trace::v1::{Span, span};
use otlp_collector_double::{CollectorDouble, TLS_DIR, attrs};

// Tests here measure this process's memory: run them one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn q(p50: f64) -> Quantiles {
    Quantiles {
        p50,
        p95: p50 * 2.0,
        p99: p50 * 3.0,
        max: p50 * 4.0,
    }
}

/// A window with evidence from every source, so every catalogued signal has a value.
fn window(i: u64) -> Window {
    Window {
        start_unix_ms: 1_700_000_000_000 + i * 1000,
        len_ms: 1000,
        phase: Some("peak".into()),
        load: Some(LoadSignals {
            requests: 10 + i,
            errors: 1,
            target_rps: Some(20.0),
            achieved_rps: 19.5,
            in_flight_max: 8,
            ttft_ms: Some(q(100.0)),
            itl_ms: Some(q(20.0)),
            e2e_ms: Some(q(900.0)),
            send_lag_ms: Some(q(0.5)),
            output_tokens_per_s: 300.0,
            ..LoadSignals::default()
        }),
        server: Some(ServerSignals {
            running: Some(8.0),
            waiting: Some(3.0),
            kv_usage: Some(0.93),
            preemptions_per_s: Some(0.5),
            prefix_hit_rate: Some(0.4),
            queue_time_p95_ms: Some(50.0),
            ttft_p95_ms: Some(180.0),
            prompt_tokens_per_s: Some(900.0),
            ..ServerSignals::default()
        }),
        runq: Some(RunqSignals {
            samples: 100,
            p50_us: 20.0,
            p99_us: 2500.0,
            mean_us: 60.0,
            total_ms: 250.0,
            loadgen_p99_us: Some(40.0),
            loadgen_total_ms: Some(2.0),
            ..RunqSignals::default()
        }),
        net: Some(NetSignals {
            connects: 2,
            connect_p99_ms: Some(0.3),
            srtt_mean_us: Some(150.0),
            srtt_max_us: Some(400.0),
            retrans: 1,
            exchanges: 12,
            server_ttfb_p50_ms: Some(5.0),
            server_first_token_p50_ms: Some(90.0),
            transit_p50_ms: Some(0.2),
            ..NetSignals::default()
        }),
        gpu: Some(GpuSignals {
            allocs: 4,
            frees: 3,
            oom: 0,
            live_bytes: 8 << 30,
            sync_ms: 12.0,
            launches: 500,
            mem_used_frac: Some(0.97),
            xids: 0,
        }),
    }
}

fn request(i: u32) -> SampledRequest {
    let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + u64::from(i));
    let ms = |m: u64| start + Duration::from_millis(m);
    SampledRequest {
        start,
        end: ms(900),
        ttft: Some(Duration::from_millis(120)),
        tpot: Some(Duration::from_millis(20)),
        input_tokens: Some(512),
        output_tokens: Some(40),
        error: None,
        stages: vec![
            Stage {
                name: "queue".into(),
                start,
                end: ms(30),
            },
            Stage {
                name: "server_first_byte".into(),
                start: ms(30),
                end: ms(110),
            },
            Stage {
                name: "gpu_sync".into(),
                start: ms(40),
                end: ms(100),
            },
            Stage {
                name: "runq_delay".into(),
                start: ms(30),
                end: ms(33),
            },
        ],
        verdict: Some("kv_cache".into()),
        attributes: vec![("inferscope.request.id".into(), format!("req-{i}"))],
        itl: Vec::new(),
    }
}

fn labels() -> Labels {
    Labels {
        scenario: Some("burst".into()),
        phase: None,
        endpoint: Some("chat".into()),
        load_level: Some("c32".into()),
    }
}

fn config(endpoint: &str, protocol: Protocol) -> OtlpConfig {
    let opts = OtlpOptions {
        endpoint: Some(endpoint.to_owned()),
        protocol: Some(protocol),
        headers: vec![("x-tenant".into(), "team-a".into())],
        timeout: Some(Duration::from_secs(2)),
        // Longer than the test: metrics leave only at shutdown, in one cumulative export.
        metric_interval: Some(Duration::from_mins(10)),
        ..OtlpOptions::default()
    };
    OtlpConfig::resolve(&opts, &|_| None).unwrap()
}

fn resource() -> Vec<(String, String)> {
    vec![
        ("host.name".into(), "node-1".into()),
        ("k8s.node.name".into(), "node-1".into()),
        ("k8s.pod.name".into(), "inferscope-abcde".into()),
    ]
}

/// Feeds three windows and five requests, shuts down, returns the stats.
async fn run(config: OtlpConfig) -> ExportStats {
    let exporter = OtlpExporter::start(&config, &resource()).unwrap();
    for i in 0..3 {
        exporter.record_window(&window(i), &labels());
    }
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

/// Names, units, attributes and values of the metrics of [`run`].
fn check_metrics(metrics: &HashMap<String, Metric>) {
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
    let _serial = SERIAL.lock().await;
    let collector = CollectorDouble::default();
    let endpoint = collector.serve_grpc();
    let stats = run(config(&endpoint, Protocol::Grpc)).await;
    check_received(&collector, stats);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_protobuf_export_reaches_the_collector_double() {
    let _serial = SERIAL.lock().await;
    let collector = CollectorDouble::default();
    let base = collector.serve_http().await;
    let stats = run(config(&base, Protocol::HttpProtobuf)).await;
    check_received(&collector, stats);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_is_verified_a_collector_with_an_unknown_ca_gets_nothing() {
    let _serial = SERIAL.lock().await;
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
    let _serial = SERIAL.lock().await;
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

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collector_down_costs_bounded_memory_and_counts_drops() {
    let _serial = SERIAL.lock().await;
    // A port that was just free: connections are refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cfg = config(&format!("http://127.0.0.1:{port}"), Protocol::Grpc);
    cfg.max_queue_size = 256;
    cfg.max_export_batch_size = 256;
    cfg.timeout = Duration::from_millis(500);
    let exporter = OtlpExporter::start(&cfg, &resource()).unwrap();

    let warm = 2_000;
    let total = 30_000;
    for i in 0..warm {
        exporter.trace_request(&request(i), &labels());
    }
    let before = rss_kib();
    let t0 = Instant::now();
    for i in warm..total {
        exporter.record_request(&request(i), &labels());
        exporter.trace_request(&request(i), &labels());
        if i % 1000 == 0 {
            exporter.record_window(&window(u64::from(i / 1000)), &labels());
        }
    }
    let recording = t0.elapsed();
    let after = rss_kib();
    // 140,000 spans of ~1 KiB each would be >100 MiB if queued without a cap.
    let growth_kib = after.saturating_sub(before);
    let t1 = Instant::now();
    let stats = tokio::task::spawn_blocking(move || exporter.shutdown())
        .await
        .unwrap()
        .unwrap();
    let shutdown = t1.elapsed();
    eprintln!(
        "collector down: {total} requests recorded in {recording:?}, RSS {before} -> {after} KiB, \
         shutdown {shutdown:?}, {stats:?}"
    );
    assert_eq!(stats.spans_submitted, u64::from(total) * 5);
    assert_eq!(stats.spans_exported, 0);
    assert_eq!(stats.spans_dropped(), stats.spans_submitted);
    assert!(
        stats.spans_queue_dropped > stats.spans_submitted / 2,
        "{stats:?}"
    );
    assert!(stats.metric_exports_failed >= 1, "{stats:?}");
    assert_eq!(stats.metric_exports_ok, 0);
    assert!(growth_kib < 24 * 1024, "RSS grew by {growth_kib} KiB");
    // And in absolute terms: a queue sized for the flood would have been allocated up front.
    assert!(after < 96 * 1024, "RSS {after} KiB");
    // The run goes on: recording never waited for the collector.
    assert!(recording < Duration::from_secs(20), "{recording:?}");
    assert!(shutdown < Duration::from_secs(30), "{shutdown:?}");
}

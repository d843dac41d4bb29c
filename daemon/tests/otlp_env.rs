//! The OTLP export configured only by the standard environment: `OTEL_EXPORTER_OTLP_*`,
//! `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, and the downward-API `K8S_*` variables the
//! `DaemonSet` sets. One test in its own binary, because it sets the process environment.

#[path = "it/otlp_collector_double/mod.rs"]
mod otlp_collector_double;

use std::time::{Duration, SystemTime};

use inferscope::collect::catalog::Labels;
use inferscope::collect::timeline::{LoadSignals, Window};
use inferscope::export::otlp::{
    OtlpConfig, OtlpExporter, OtlpOptions, Protocol, SampledRequest, Stage, resource_attributes,
};
use otlp_collector_double::{CollectorDouble, attrs};

#[test]
fn standard_environment_variables_configure_the_export() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let vars = [
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{port}"),
        ),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc".to_owned()),
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=from-env".to_owned()),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "3000".to_owned()),
        ("OTEL_SERVICE_NAME", "inferscope-ci".to_owned()),
        (
            "OTEL_RESOURCE_ATTRIBUTES",
            "deployment.environment.name=ci".to_owned(),
        ),
        ("K8S_NODE_NAME", "node-7".to_owned()),
        ("K8S_POD_NAME", "inferscope-x7k2p".to_owned()),
        ("K8S_NAMESPACE_NAME", "inferscope".to_owned()),
        ("K8S_POD_UID", "0b9f-uid".to_owned()),
    ];
    for (k, v) in &vars {
        // SAFETY: the only test of this binary, before any runtime thread exists; the harness's
        // main thread only waits.
        unsafe { std::env::set_var(k, v) };
    }

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let _in_runtime = rt.enter();
    let collector = CollectorDouble::default();
    collector.serve_grpc_on(listener);

    let env = |k: &str| std::env::var(k).ok();
    let opts = OtlpOptions {
        metric_interval: Some(Duration::from_mins(10)),
        ..OtlpOptions::default()
    };
    let config = OtlpConfig::resolve(&opts, &env).unwrap();
    assert_eq!(config.protocol, Protocol::Grpc);
    assert_eq!(config.traces_endpoint, format!("http://127.0.0.1:{port}"));
    assert_eq!(config.timeout, Duration::from_secs(3));

    let exporter = OtlpExporter::start(&config, &resource_attributes(&env)).unwrap();
    let window = Window {
        phase: Some("warmup".into()),
        load: Some(LoadSignals {
            requests: 3,
            ..LoadSignals::default()
        }),
        ..Window::default()
    };
    exporter.record_window(&window, &Labels::default());
    exporter.trace_request(&timed_out(), &Labels::default());
    let stats = exporter.shutdown().unwrap();
    assert_eq!(stats.spans_exported, 2, "{stats:?}");

    let resource = collector.resource();
    assert_eq!(resource["service.name"], "inferscope-ci");
    assert_eq!(resource["deployment.environment.name"], "ci");
    assert_eq!(resource["host.name"], "node-7");
    assert_eq!(resource["k8s.node.name"], "node-7");
    assert_eq!(resource["k8s.pod.name"], "inferscope-x7k2p");
    assert_eq!(resource["k8s.namespace.name"], "inferscope");
    assert_eq!(resource["k8s.pod.uid"], "0b9f-uid");
    assert!(
        collector
            .headers
            .lock()
            .unwrap()
            .contains(&("x-tenant".into(), "from-env".into()))
    );
    // The window's phase labels its series; a failed request's span says so.
    let metrics = collector.metrics();
    let debug = format!("{:?}", metrics["inferscope.load.requests"]);
    assert!(debug.contains("warmup"), "{debug}");
    let spans = collector.spans();
    let request = spans
        .iter()
        .find(|s| s.name == "inferscope.request")
        .unwrap();
    assert_eq!(attrs(&request.attributes)["error.type"], "timeout");
    assert_eq!(
        request.status.as_ref().unwrap().code,
        2,
        "status must be Error"
    );
}

/// A request that timed out after 50 ms, queued for its first 5.
fn timed_out() -> SampledRequest {
    let start = SystemTime::now();
    SampledRequest {
        start,
        end: start + Duration::from_millis(50),
        ttft: None,
        tpot: None,
        input_tokens: None,
        output_tokens: None,
        error: Some("timeout".into()),
        stages: vec![Stage {
            name: "queue".into(),
            start,
            end: start + Duration::from_millis(5),
        }],
        verdict: None,
        attributes: Vec::new(),
        itl: Vec::new(),
        ids: None,
        gen_ai: None,
        pipeline: None,
    }
}

//! The control API with the real launcher: a run of the embedded load generator against the
//! embedded simulated vLLM server, started, phase-marked and reported over HTTP. Loopback
//! only; no root needed.

use inferscope::collect::identity::ServerKey;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::{Method, Request};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use inferscope::api::{Api, ApiConfig, LoadgenLauncher, Marks};
use inferscope::dial::Reach;
use serde_json::Value;

async fn call(base: &str, method: Method, path: &str, body: &str) -> (u16, Value) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = Request::builder()
        .method(method)
        .uri(format!("{base}{path}"))
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let status = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, value)
}

async fn sim() -> inferscope::sim::SimServer {
    let mut cfg = inferscope::sim::profile("healthy").unwrap();
    cfg.vector.corpus_size = 500;
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    inferscope::sim::start(cfg, l).await.unwrap()
}

async fn api(reach: Reach, marks: Marks) -> String {
    let config = ApiConfig {
        bind: "127.0.0.1:0".parse().unwrap(),
        ..ApiConfig::default()
    };
    let launcher = Arc::new(LoadgenLauncher::new(reach, None));
    let api = Api::bind(&config, launcher, marks).await.unwrap();
    let addr = api.local_addr().unwrap();
    tokio::spawn(api.serve(std::future::pending()));
    format!("http://{addr}")
}

fn scenario(target: &str, secs: u32) -> String {
    format!(
        "name: api-run\ntarget: {target}\nseed: 3\nphases:\n\
         \x20 - name: warm\n    duration: {secs}s\n    load: {{shape: constant, rate: 20}}\n\
         \x20   request: {{endpoint: chat, model: inferscope-sim, max_tokens: 8}}\n\
         \x20 - name: peak\n    duration: {secs}s\n    load: {{shape: constant, rate: 40}}\n\
         \x20   request: {{endpoint: chat, model: inferscope-sim, max_tokens: 8}}\n"
    )
}

/// Polls until the run leaves `running`/`stopping`; returns the final `GET` answer.
async fn wait_done(base: &str, id: &str) -> Value {
    for _ in 0..300 {
        let (s, run) = call(base, Method::GET, &format!("/api/v1/runs/{id}"), "").await;
        assert_eq!(s, 200, "{run}");
        let state = run["status"]["state"].as_str().unwrap().to_owned();
        if state != "running" && state != "stopping" {
            return run;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("run {id} did not finish within 30s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_over_the_api_is_marked_and_reported() {
    let sim = sim().await;
    let marks = Marks::default();
    let base = api(Reach::Loopback, marks.clone()).await;

    let (s, created) = call(
        &base,
        Method::POST,
        "/api/v1/runs",
        &scenario(&format!("http://{}", sim.addr()), 1),
    )
    .await;
    assert_eq!(s, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(created["status"]["state"], "running");
    assert_eq!(created["status"]["phase"], "warm");

    // One run at a time.
    let (s, busy) = call(
        &base,
        Method::POST,
        "/api/v1/runs",
        &scenario(&format!("http://{}", sim.addr()), 1),
    )
    .await;
    assert_eq!(s, 409, "{busy}");

    // An external load generator marks the phases of its run while ours goes on.
    let (s, m) = call(
        &base,
        Method::POST,
        "/api/v1/marks",
        r#"{"phase":"baseline","source":"k6"}"#,
    )
    .await;
    assert_eq!(s, 201, "{m}");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (_, mid) = call(&base, Method::GET, &format!("/api/v1/runs/{id}"), "").await;
    if mid["status"]["state"] == "running" {
        assert_eq!(mid["status"]["phase"], "peak", "{mid}");
    }
    let (s, _) = call(
        &base,
        Method::POST,
        "/api/v1/marks",
        r#"{"phase":"peak","source":"k6"}"#,
    )
    .await;
    assert_eq!(s, 201);

    let run = wait_done(&base, &id).await;
    assert_eq!(run["status"]["state"], "finished", "{run}");
    assert!(run["status"]["finished_unix_ms"].as_u64().is_some());
    let report = &run["report"];
    assert_eq!(report["scenario"], "api-run");
    let phases = report["phases"].as_array().unwrap();
    assert_eq!(phases.len(), 2);
    for p in phases {
        let finished = p["counts"]["finished"].as_u64().unwrap();
        assert!(finished > 0, "{p}");
        assert_eq!(p["counts"]["ok"], finished, "{p}");
        assert!(p["latency_ms"]["ttft"]["count"].as_u64().unwrap() > 0);
    }
    let total: u64 = phases
        .iter()
        .map(|p| p["counts"]["finished"].as_u64().unwrap())
        .sum();
    assert_eq!(total, 60, "20/s for 1 s, then 40/s for 1 s");

    let (s, list) = call(&base, Method::GET, "/api/v1/marks", "").await;
    assert_eq!(s, 200);
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["phase"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["baseline", "peak"]);
    let first = list[0]["at_unix_ms"].as_u64().unwrap();
    assert_eq!(
        marks.phase_at(first, &ServerKey::Target).as_deref(),
        Some("baseline")
    );
    assert_eq!(
        marks.phase_at(u64::MAX, &ServerKey::Target).as_deref(),
        Some("peak")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_run_says_so_and_keeps_its_report() {
    let sim = sim().await;
    let base = api(Reach::Loopback, Marks::default()).await;
    let (s, created) = call(
        &base,
        Method::POST,
        "/api/v1/runs",
        &scenario(&format!("http://{}", sim.addr()), 30),
    )
    .await;
    assert_eq!(s, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (s, stop) = call(&base, Method::POST, &format!("/api/v1/runs/{id}/stop"), "").await;
    assert_eq!(s, 200, "{stop}");
    assert_eq!(stop["status"]["state"], "stopping");
    let run = wait_done(&base, &id).await;
    assert_eq!(run["status"]["state"], "stopped", "{run}");
    let warm = &run["report"]["phases"][0];
    assert!(warm["counts"]["finished"].as_u64().unwrap() > 0, "{warm}");
    assert!(run["report"]["stopped"].as_str().is_some());
}

#[tokio::test]
async fn bad_scenarios_get_400_with_the_place_and_remote_targets_need_allow_remote() {
    let base = api(Reach::Loopback, Marks::default()).await;
    let bad = "target: http://127.0.0.1:9\nphases:\n  - name: a\n    duration: 1s\n    load: {shape: constant, rat: 5}\n";
    let (s, e) = call(&base, Method::POST, "/api/v1/runs", bad).await;
    assert_eq!(s, 400, "{e}");
    let msg = e["error"].as_str().unwrap();
    assert!(msg.contains("scenario:5:"), "{msg}");
    assert!(msg.contains("unknown field `rat`"), "{msg}");

    let remote = scenario("http://10.1.2.3:8000", 1);
    let (s, e) = call(&base, Method::POST, "/api/v1/runs", &remote).await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(
        e["error"].as_str().unwrap(),
        "invalid scenario: target http://10.1.2.3:8000 is not a loopback address: start the daemon with --allow-remote to load a remote service",
        "{e}"
    );
    let (s, _) = call(&base, Method::GET, "/api/v1/runs/run-7", "").await;
    assert_eq!(s, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_posted_run_is_exported_live_over_otlp() {
    use crate::otlp_collector_double::{CollectorDouble, attrs};
    use inferscope::export::otlp::{OtlpConfig, OtlpExporter, OtlpOptions, Protocol, Sampler};
    let collector = CollectorDouble::default();
    let endpoint = collector.serve_http().await;
    let config = OtlpConfig::resolve(
        &OtlpOptions {
            endpoint: Some(endpoint),
            protocol: Some(Protocol::HttpProtobuf),
            metric_interval: Some(Duration::from_mins(10)),
            ..OtlpOptions::default()
        },
        &|_| None,
    )
    .unwrap();
    let exporter = Arc::new(OtlpExporter::start(&config, &[]).unwrap());
    let sim = sim().await;
    let launcher = Arc::new(
        LoadgenLauncher::new(Reach::Loopback, None)
            .with_otlp(exporter.clone(), Sampler::new(1.0).unwrap()),
    );
    let api = Api::bind(
        &ApiConfig {
            bind: "127.0.0.1:0".parse().unwrap(),
            ..ApiConfig::default()
        },
        launcher,
        Marks::default(),
    )
    .await
    .unwrap();
    let base = format!("http://{}", api.local_addr().unwrap());
    tokio::spawn(api.serve(std::future::pending()));
    let target = format!("http://{}", sim.addr());
    let (s, started) = call(&base, Method::POST, "/api/v1/runs", &scenario(&target, 1)).await;
    assert_eq!(s, 201, "{started}");
    let run = wait_done(&base, started["id"].as_str().unwrap()).await;
    assert_eq!(run["status"]["state"], "finished", "{run}");
    let finished: u64 = run["report"]["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["counts"]["finished"].as_u64().unwrap())
        .sum();
    // The run's export task may still hold its last records: flush until they are all in
    // (the API keeps the launcher, and so the exporter, for good).
    let mut counted = 0;
    for _ in 0..50 {
        let x = Arc::clone(&exporter);
        tokio::task::spawn_blocking(move || x.flush())
            .await
            .unwrap()
            .unwrap();
        counted = duration_count(&collector);
        if counted >= finished {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(counted, finished);
    let metrics = collector.metrics();
    let Some(opentelemetry_proto::tonic::metrics::v1::metric::Data::Histogram(h)) =
        &metrics["http.client.request.duration"].data
    else {
        panic!("no duration histogram")
    };
    let mut phases: Vec<(String, u64)> = h
        .data_points
        .iter()
        .map(|p| (attrs(&p.attributes)["phase"].clone(), p.count))
        .collect();
    phases.sort();
    assert_eq!(phases.iter().map(|(_, n)| n).sum::<u64>(), finished);
    assert_eq!(
        phases.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(),
        ["peak", "warm"]
    );
    let spans = collector
        .spans()
        .into_iter()
        .filter(|s| s.name == "inferscope.request")
        .count();
    assert_eq!(spans as u64, finished);
}

/// Requests in the newest export of `http.client.request.duration`.
fn duration_count(collector: &crate::otlp_collector_double::CollectorDouble) -> u64 {
    match collector
        .metrics()
        .get("http.client.request.duration")
        .and_then(|m| m.data.clone())
    {
        Some(opentelemetry_proto::tonic::metrics::v1::metric::Data::Histogram(h)) => {
            h.data_points.iter().map(|p| p.count).sum()
        }
        _ => 0,
    }
}

//! Memory bounds of a run: response bodies are read through a limit, and the records kept for
//! the report stop at their budget while the metrics still count every request.

use std::{path::Path, time::Duration};

use axum::{Router, routing::get};
use inferscope::loadgen::{self, Options, Plan, client::MAX_BODY};
use inferscope::measure::record::ErrorClass;
use tokio_util::sync::CancellationToken;

async fn server() -> String {
    let app = Router::new()
        .route("/small", get(|| async { "ok" }))
        .route("/huge", get(|| async { vec![b'a'; MAX_BODY + 1] }));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    format!("http://{addr}")
}

fn scenario(target: &str, path: &str, rate: u32) -> Plan {
    let yaml = format!(
        "target: {target}\ntimeout: 10s\nphases:\n  - name: a\n    duration: 1s\n    load: {{shape: constant, rate: {rate}}}\n    request: {{endpoint: http, path: {path}}}\n"
    );
    Plan::from_yaml(&yaml, "s.yaml", Path::new(".")).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_past_the_limit_fails_the_request_instead_of_filling_memory() {
    let target = server().await;
    let r = loadgen::run(
        &scenario(&target, "/huge", 2),
        Options::new(),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(r.records.len(), 2);
    for rec in &r.records {
        assert_eq!(rec.error, Some(ErrorClass::MalformedStream), "{rec:?}");
        let msg = rec.error_message.as_deref().unwrap();
        assert!(msg.contains("response body larger than 32 MiB"), "{msg}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_past_the_budget_are_counted_not_kept() {
    let target = server().await;
    let one = std::mem::size_of::<inferscope::measure::RequestRecord>();
    let opts = Options {
        // Room for five short records.
        records_budget: one * 5 + one / 2,
        ..Options::new()
    };
    let r = tokio::time::timeout(
        Duration::from_secs(20),
        loadgen::run(
            &scenario(&target, "/small", 40),
            opts,
            CancellationToken::new(),
        ),
    )
    .await
    .unwrap()
    .unwrap();
    let finished = r.phases[0].counts.finished;
    assert_eq!(finished, 40, "{:?}", r.phases[0].counts);
    assert_eq!(r.records.len(), 5);
    assert_eq!(r.records_overflow, 35);
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["records_overflow"], 35);
}

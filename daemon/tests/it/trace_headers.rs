//! Every request carries a W3C `traceparent` and an `x-request-id`, seen at a test server that
//! records the headers of each request: open-loop chat requests (the pooled client), the turns
//! of conversations (a trace each) and a closed loop's plain GETs (the raw HTTP/1.1 path); the
//! ids are the report's records', one request each. `trace_headers: false` sends none. An
//! agentic session's calls (its sub-agents' too) share a trace of their own. Loopback only; no
//! root needed.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
    sync::{Arc, Mutex},
};

use axum::{
    Json, Router,
    extract::State,
    http::{HeaderMap, Method, Uri},
    routing::{get, post},
};
use inferscope::loadgen::{self, Options, Plan, StressReport};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// What the server saw of one request: its path, `traceparent` and `x-request-id`.
type Seen = (String, Option<String>, Option<String>);

fn record(seen: &Mutex<Vec<Seen>>, method: &Method, uri: &Uri, h: &HeaderMap) {
    let text = |k: &str| h.get(k).map(|v| v.to_str().unwrap().to_owned());
    seen.lock().unwrap().push((
        format!("{method} {}", uri.path()),
        text("traceparent"),
        text("x-request-id"),
    ));
}

/// A server answering chat (whole answers) and `GET /health`; `/v1/models` is not found, so
/// the run asks it nothing else.
async fn server() -> (String, Arc<Mutex<Vec<Seen>>>) {
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let app = Router::new()
        .route(
            "/v1/chat/completions",
            post(
                |State(s): State<Arc<Mutex<Vec<Seen>>>>, m: Method, u: Uri, h: HeaderMap| async move {
                    record(&s, &m, &u, &h);
                    Json(json!({
                        "id": "c", "object": "chat.completion", "model": "m",
                        "choices": [{"index": 0, "finish_reason": "stop",
                            "message": {"role": "assistant", "content": "fine"}}],
                        "usage": {"prompt_tokens": 3, "completion_tokens": 1}
                    }))
                },
            ),
        )
        .route(
            "/health",
            get(
                |State(s): State<Arc<Mutex<Vec<Seen>>>>, m: Method, u: Uri, h: HeaderMap| async move {
                    record(&s, &m, &u, &h);
                    "ok"
                },
            ),
        )
        .with_state(seen.clone());
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    (url, seen)
}

const PHASES: &str = "\
phases:
  - name: single
    duration: 1s
    load: {shape: constant, rate: 20}
    request: {endpoint: chat, model: m, stream: false}
  - name: talk
    duration: 1s
    load: {shape: constant, rate: 5}
    request: {endpoint: chat, model: m, stream: false, conversation: {turns: 3}}
  - name: plain
    duration: 1s
    load: {shape: concurrency, users: 2}
    request: {endpoint: http, method: GET, path: /health}
";

async fn run(extra: &str) -> (StressReport, Vec<Seen>) {
    let (url, seen) = server().await;
    let yaml = format!("target: {url}\ntimeout: 5s\ngrace: 1s\n{extra}{PHASES}");
    let plan = Plan::from_yaml(&yaml, "trace.yaml", Path::new(".")).unwrap();
    let r = loadgen::run(&plan, Options::new(), CancellationToken::new())
        .await
        .unwrap();
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    (r, seen)
}

fn is_hex(s: &str, digits: usize) -> bool {
    s.len() == digits && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_carries_a_traceparent_the_report_records() {
    let (r, seen) = run("").await;
    assert!(r.records.len() >= 30, "{} records", r.records.len());
    assert_eq!(seen.len(), r.records.len(), "one request per record");
    let run_trace = r.run.as_ref().unwrap().trace_id.unwrap().to_string();

    // At the server: version 00, a trace id and a span id, sampled; the request id is the two.
    let mut at_server = BTreeMap::new();
    for (path, parent, id) in &seen {
        let parent = parent
            .as_deref()
            .unwrap_or_else(|| panic!("{path}: no traceparent"));
        let f: Vec<&str> = parent.split('-').collect();
        assert_eq!(f.len(), 4, "{parent}");
        assert_eq!((f[0], f[3]), ("00", "01"), "{parent}");
        assert!(is_hex(f[1], 32) && is_hex(f[2], 16), "{parent}");
        assert_ne!(f[1], "0".repeat(32));
        assert_eq!(id.as_deref(), Some(format!("{}-{}", f[1], f[2]).as_str()));
        assert!(
            at_server
                .insert(id.clone().unwrap(), path.clone())
                .is_none(),
            "ids repeat"
        );
    }

    // In the report: the same ids, one record each; conversations have traces of their own,
    // every other request is in the run's.
    let mut conversations: BTreeMap<String, usize> = BTreeMap::new();
    for rec in &r.records {
        let t = rec.trace.unwrap();
        let json = serde_json::to_value(t).unwrap();
        let id = json["request_id"].as_str().unwrap().to_owned();
        assert_eq!(id, t.request_id());
        assert!(at_server.contains_key(&id), "{id} never reached the server");
        let trace = json["trace_id"].as_str().unwrap().to_owned();
        if r.phases[rec.phase as usize].name == "talk" {
            assert_ne!(trace, run_trace);
            *conversations.entry(trace).or_default() += 1;
        } else {
            assert_eq!(trace, run_trace, "{}", r.phases[rec.phase as usize].name);
        }
    }
    assert!(!conversations.is_empty());
    // Three turns each (those cut by the phase's end fewer).
    assert!(conversations.values().all(|&n| (1..=3).contains(&n)));
    assert!(conversations.values().any(|&n| n == 3), "{conversations:?}");
    let paths: BTreeSet<&str> = seen.iter().map(|(p, _, _)| p.as_str()).collect();
    assert_eq!(
        paths,
        BTreeSet::from(["GET /health", "POST /v1/chat/completions"])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_headers_false_sends_none() {
    let (r, seen) = run("trace_headers: false\n").await;
    assert!(r.records.len() >= 30, "{} records", r.records.len());
    assert!(
        seen.iter().all(|(_, p, id)| p.is_none() && id.is_none()),
        "{seen:?}"
    );
    assert!(r.records.iter().all(|rec| rec.trace.is_none()));
    assert_eq!(r.run.unwrap().trace_id, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_agentic_session_is_a_trace_of_its_own() {
    let sim = crate::sim_process::SimProcess::start(["--ttft-ms", "2", "--itl-ms", "1"]);
    let yaml = format!(
        "target: {}\ntimeout: 5s\nphases:\n  - name: agents\n    duration: 1s\n\
         \x20   load: {{shape: constant, rate: 6}}\n\
         \x20   request:\n      max_tokens: 4\n      session:\n        steps:\n\
         \x20         - llm: {{}}\n          - agents: {{count: 2, steps: [{{llm: {{}}}}]}}\n\
         \x20         - llm: {{}}\n",
        sim.url
    );
    let plan = Plan::from_yaml(&yaml, "sessions.yaml", Path::new(".")).unwrap();
    let r = loadgen::run(&plan, Options::new(), CancellationToken::new())
        .await
        .unwrap();
    let run_trace = r.run.as_ref().unwrap().trace_id.unwrap();
    let mut traces: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
    for rec in &r.records {
        let t = rec.trace.unwrap();
        assert_ne!(t.trace_id(), run_trace);
        traces
            .entry(rec.session.as_ref().unwrap().id)
            .or_default()
            .insert(t.trace_id().to_string());
    }
    assert!(traces.len() >= 3, "{traces:?}");
    // One trace per session (its sub-agents' calls in it), none shared.
    assert!(traces.values().all(|t| t.len() == 1), "{traces:?}");
    let all: BTreeSet<&String> = traces.values().flatten().collect();
    assert_eq!(all.len(), traces.len());
    assert!(r.records.len() > traces.len(), "sessions of several calls");
}

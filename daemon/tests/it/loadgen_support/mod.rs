//! A local test server for the load-generator tests: it stamps every request's arrival,
//! can stall all answers for a while, and speaks enough of the `OpenAI` and vector APIs.
#![allow(dead_code)]

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use axum::{
    Json, Router,
    body::Body,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde_json::{Value, json};

/// Shared state the tests inspect and steer.
#[derive(Default)]
pub struct Stamps {
    /// Arrival time of every request.
    pub arrivals: Mutex<Vec<Instant>>,
    /// While `now` is inside this window, answers wait until its end.
    pub pause: Mutex<Option<(Instant, Instant)>>,
}

impl Stamps {
    /// Arrival offsets in seconds from the first one.
    pub fn offsets(&self) -> Vec<f64> {
        let a = self.arrivals.lock().unwrap();
        let first = *a.first().unwrap();
        let mut v: Vec<f64> = a
            .iter()
            .map(|t| t.duration_since(first).as_secs_f64())
            .collect();
        v.sort_by(f64::total_cmp);
        v
    }
}

async fn stamp(s: &Stamps) {
    let now = Instant::now();
    s.arrivals.lock().unwrap().push(now);
    let pause = *s.pause.lock().unwrap();
    if let Some((from, to)) = pause
        && now >= from
        && now < to
    {
        tokio::time::sleep_until(to.into()).await;
    }
}

async fn plain(State(s): State<Arc<Stamps>>) -> &'static str {
    stamp(&s).await;
    "ok"
}

async fn chat(State(s): State<Arc<Stamps>>, Json(req): Json<Value>) -> Response {
    stamp(&s).await;
    let max = req["max_tokens"].as_u64().unwrap_or(4).min(8);
    let prompt = req["messages"][0]["content"].as_str().unwrap_or("");
    if prompt.len() > 100_000 {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": {"message": "prompt too long", "type": "invalid_request_error", "code": 400}})),
        )
            .into_response();
    }
    if req["stream"] != json!(true) {
        return Json(json!({
            "choices": [{"message": {"role": "assistant", "content": "tok ".repeat(max as usize)}, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": max}
        }))
        .into_response();
    }
    let usage = req["stream_options"]["include_usage"] == json!(true);
    let stream = async_stream(max, usage);
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap()
}

fn async_stream(
    max: u64,
    usage: bool,
) -> impl futures_util::stream::Stream<Item = Result<String, std::io::Error>> {
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        for i in 0..max {
            if i > 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let fin = if i + 1 == max {
                json!("length")
            } else {
                Value::Null
            };
            let chunk = json!({"choices": [{"index": 0, "delta": {"content": "tok "}, "finish_reason": fin}]});
            if tx.send(Ok(format!("data: {chunk}\n\n"))).await.is_err() {
                return;
            }
        }
        if usage {
            let u = json!({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": max}});
            let _ = tx.send(Ok(format!("data: {u}\n\n"))).await;
        }
        let _ = tx.send(Ok("data: [DONE]\n\n".to_string())).await;
    });
    tokio_stream_from(rx)
}

fn tokio_stream_from<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures_util::stream::Stream<Item = T> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

async fn search(State(s): State<Arc<Stamps>>, Json(req): Json<Value>) -> Json<Value> {
    stamp(&s).await;
    let k = req["top_k"].as_u64().unwrap_or(10);
    // The approximate search misses the last true neighbour: recall@k = (k-1)/k.
    let ids: Vec<Value> = (0..k)
        .map(|i| json!({"id": if i + 1 == k { 1000 } else { i }, "distance": i}))
        .collect();
    Json(json!({"results": ids}))
}

async fn exact(Json(req): Json<Value>) -> Json<Value> {
    let k = req["top_k"].as_u64().unwrap_or(10);
    let ids: Vec<Value> = (0..k).map(|i| json!({"id": i, "distance": i})).collect();
    Json(json!({"results": ids}))
}

/// Starts the server on 127.0.0.1:0 in the current runtime.
pub async fn start() -> (SocketAddr, Arc<Stamps>) {
    let stamps = Arc::new(Stamps::default());
    let app = Router::new()
        .route("/", get(plain))
        .route("/v1/chat/completions", post(chat))
        .route("/v1/vector/search", post(search))
        .route("/v1/vector/exact", post(exact))
        .route("/v1/vector/rebuild", post(|| async { "rebuilding" }))
        .with_state(stamps.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, stamps)
}

/// Starts the server on its own runtime thread (for tests that run the CLI binary).
pub fn start_in_thread() -> (SocketAddr, Arc<Stamps>) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            tx.send(start().await).unwrap();
            std::future::pending::<()>().await;
        });
    });
    rx.recv().unwrap()
}

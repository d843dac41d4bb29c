//! The re-rank endpoint and tool calls through the sim's router, with no socket.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use axum::{
    Router,
    body::Body,
    http::{Request, StatusCode},
};
use serde_json::{Value, json};

use super::{
    SimConfig,
    config::CostModel,
    engine::{Engine, Shared},
    http,
    openai::Message,
    state::AppState,
    tokenizer, tools,
    vector::VectorService,
};

const M: &str = "inferscope-sim";

fn config() -> SimConfig {
    let mut cfg = SimConfig {
        cost: CostModel::zero(),
        ..SimConfig::default()
    };
    cfg.vector.corpus_size = 50;
    cfg
}

fn app(cfg: SimConfig) -> (Router, Arc<AppState>) {
    let shared = Arc::new(Shared::new(&cfg));
    let engine = Arc::new(Engine::start(&cfg, shared.clone()).unwrap());
    let vector = Arc::new(VectorService::new(&cfg.vector));
    let state = Arc::new(AppState::new(cfg, Some(engine), shared, vector));
    (http::router(state.clone()), state)
}

/// POSTs `body` to `path`; the status and the body's text.
async fn post(app: &Router, path: &str, body: impl Into<Body>) -> (StatusCode, String) {
    let mut svc = app.clone();
    let req = Request::post(path)
        .header("content-type", "application/json")
        .body(body.into())
        .unwrap();
    std::future::poll_fn(|cx| tower_service::Service::<Request<Body>>::poll_ready(&mut svc, cx))
        .await
        .unwrap();
    let resp = tower_service::Service::call(&mut svc, req).await.unwrap();
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

async fn post_json(app: &Router, path: &str, body: &Value) -> (StatusCode, Value) {
    let (s, text) = post(app, path, body.to_string()).await;
    (s, serde_json::from_str(&text).unwrap())
}

fn counter(state: &AppState, name: &str) -> Option<f64> {
    super::exposition::sample(&state.metrics_text(), name)
}

#[tokio::test]
async fn rerank_orders_by_relevance_and_cuts_to_top_n() {
    let (app, state) = app(config());
    let docs =
        json!(["the weather today", {"text": "KV cache eviction in vLLM"}, "a KV store", "cache"]);
    let (s, v) = post_json(
        &app,
        "/v1/rerank",
        &json!({
            "model": M, "query": "how does KV cache eviction work", "documents": docs,
            "top_n": 3, "return_documents": true,
        }),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert!(v["id"].as_str().unwrap().starts_with("rerank-"));
    assert_eq!(v["model"], M);
    let results = v["results"].as_array().unwrap();
    let order: Vec<u64> = results
        .iter()
        .map(|r| r["index"].as_u64().unwrap())
        .collect();
    // 3 of 6 query words in 5; 1 of 6 in 1; 1 of 6 in 3.
    assert_eq!(order, [1, 3, 2]);
    let scores: Vec<f64> = results
        .iter()
        .map(|r| r["relevance_score"].as_f64().unwrap())
        .collect();
    assert!(
        scores.windows(2).all(|w| w[0] >= w[1]) && scores[0] > scores[2],
        "{scores:?}"
    );
    assert_eq!(results[0]["document"]["text"], "KV cache eviction in vLLM");
    let q = tokenizer::count("how does KV cache eviction work");
    let d: usize = [
        "the weather today",
        "KV cache eviction in vLLM",
        "a KV store",
        "cache",
    ]
    .iter()
    .map(|t| tokenizer::count(t))
    .sum();
    assert_eq!(v["usage"]["total_tokens"], 4 * q + d);
    // Without return_documents and top_n: every document, no text.
    let (_, v) = post_json(
        &app,
        "/v1/rerank",
        &json!({"query": "cache", "documents": docs}),
    )
    .await;
    assert_eq!(v["results"].as_array().unwrap().len(), 4);
    assert_eq!(v["results"][0]["index"], 3);
    assert!(v["results"][0].get("document").is_none());
    assert_eq!(
        counter(&state, "inferscope_sim_rerank_requests_total"),
        Some(2.0)
    );
    assert_eq!(
        counter(&state, "inferscope_sim_rerank_documents_total"),
        Some(8.0)
    );
}

#[tokio::test]
async fn rerank_bad_input_is_an_openai_error() {
    let (app, state) = app(config());
    let bad = [
        ("{not json", "malformed JSON", None),
        (r#"{"documents": ["a"]}"#, "query", None),
        (
            r#"{"query": "q", "documents": []}"#,
            "documents must not be empty",
            Some("documents"),
        ),
        (
            r#"{"query": " ", "documents": ["a"]}"#,
            "query must not be empty",
            Some("query"),
        ),
        (
            r#"{"query": "q", "documents": ["a"], "top_n": 0}"#,
            "top_n",
            Some("top_n"),
        ),
        (
            r#"{"query": "q", "documents": ["a"], "top_n": -1}"#,
            "invalid request",
            None,
        ),
        (
            r#"{"query": "q", "documents": [1]}"#,
            "invalid request",
            None,
        ),
    ];
    for (body, says, param) in bad {
        let (s, text) = post(&app, "/v1/rerank", body).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{body}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
        assert_eq!(v["error"]["code"], 400);
        assert!(
            v["error"]["message"].as_str().unwrap().contains(says),
            "{body}: {v}"
        );
        assert_eq!(v["error"]["param"].as_str(), param, "{body}");
    }
    let (s, _) = post(
        &app,
        "/v1/rerank",
        r#"{"model": "other", "query": "q", "documents": ["a"]}"#,
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(
        counter(&state, "inferscope_sim_rerank_requests_total"),
        Some(0.0)
    );
}

fn costly(per_doc_us: f64, concurrency: usize) -> SimConfig {
    let mut cfg = config();
    cfg.cost = CostModel {
        fixed_us: 0.0,
        per_prefill_token_us: 0.0,
        per_seq_us: per_doc_us,
        cpu_fraction: 0.0,
    };
    cfg.rerank.concurrency = concurrency;
    cfg
}

async fn timed_rerank(app: &Router, documents: usize) -> Duration {
    let t0 = Instant::now();
    let docs: Vec<String> = (0..documents).map(|i| format!("document {i}")).collect();
    let (s, _) = post_json(app, "/v1/rerank", &json!({"query": "q", "documents": docs})).await;
    assert_eq!(s, StatusCode::OK);
    t0.elapsed()
}

#[tokio::test]
async fn rerank_cost_grows_with_documents() {
    let (app, _) = app(costly(2000.0, 1));
    let one = timed_rerank(&app, 1).await;
    let thirty = timed_rerank(&app, 30).await;
    assert!(thirty >= Duration::from_millis(60), "{thirty:?}");
    assert!(one < thirty, "{one:?} vs {thirty:?}");
}

#[tokio::test]
async fn rerank_requests_wait_their_turn_under_load() {
    let (app, _) = app(costly(30_000.0, 1));
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let app = app.clone();
        set.spawn(async move { timed_rerank(&app, 1).await });
    }
    let latencies = set.join_all().await;
    // 30 ms each, one at a time: the last in line waited for the three before it.
    let slowest = latencies.iter().max().unwrap();
    assert!(*slowest >= Duration::from_millis(120), "{latencies:?}");
}

fn chat_body(messages: &Value, stream: bool) -> Value {
    json!({
        "model": M, "messages": messages, "stream": stream, "seed": 1,
        "tools": [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}],
    })
}

#[tokio::test]
async fn tool_call_whole_answer() {
    let (app, state) = app(config());
    let messages = json!([{"role": "user", "content": "Where is the KV cache?"}]);
    let (s, v) = post_json(&app, "/v1/chat/completions", &chat_body(&messages, false)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert!(choice["message"]["content"].is_null());
    let call = &choice["message"]["tool_calls"][0];
    assert!(call["id"].as_str().unwrap().starts_with("call_"));
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"]["name"], "search");
    let args = call["function"]["arguments"].as_str().unwrap();
    let parsed: Value = serde_json::from_str(args).unwrap();
    assert_eq!(parsed, json!({"query": "Where is the KV cache?"}));
    assert_eq!(v["usage"]["completion_tokens"], tokenizer::count(args));
    assert_eq!(
        counter(&state, "inferscope_sim_tool_calls_total"),
        Some(1.0)
    );
    // max_tokens cuts the arguments: finish_reason `length`.
    let mut body = chat_body(&messages, false);
    body["max_tokens"] = json!(2);
    let (_, v) = post_json(&app, "/v1/chat/completions", &body).await;
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(
        v["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
        "{\""
    );
}

/// The JSON events of an SSE body, and whether it ended with `[DONE]`.
fn events(text: &str) -> (Vec<Value>, bool) {
    let data: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect();
    let done = data.last() == Some(&"[DONE]");
    let evs = data
        .iter()
        .filter(|d| **d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    (evs, done)
}

#[tokio::test]
async fn tool_call_streamed() {
    let (app, _) = app(config());
    let messages = json!([{"role": "user", "content": "find cache papers"}]);
    let (s, text) = post(
        &app,
        "/v1/chat/completions",
        chat_body(&messages, true).to_string(),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{text}");
    let (evs, done) = events(&text);
    assert!(done, "{text}");
    assert_eq!(evs[0]["choices"][0]["delta"]["role"], "assistant");
    let first = &evs[1]["choices"][0]["delta"]["tool_calls"][0];
    assert_eq!(first["index"], 0);
    assert!(first["id"].as_str().unwrap().starts_with("call_"));
    assert_eq!(first["type"], "function");
    assert_eq!(first["function"]["name"], "search");
    let deltas = &evs[1..evs.len() - 1];
    for e in &deltas[1..] {
        let call = &e["choices"][0]["delta"]["tool_calls"][0];
        assert_eq!(call["index"], 0);
        assert!(
            call.get("id").is_none() && call["function"].get("name").is_none(),
            "{e}"
        );
    }
    let args: String = deltas
        .iter()
        .map(|e| {
            e["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]
                .as_str()
                .unwrap()
        })
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&args).unwrap(),
        json!({"query": "find cache papers"})
    );
    let last = &evs[evs.len() - 1]["choices"][0];
    assert_eq!(last["finish_reason"], "tool_calls");
    assert_eq!(last["delta"], json!({}));
}

async fn is_text_answer(app: &Router, body: &Value) -> bool {
    let (s, v) = post_json(app, "/v1/chat/completions", body).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let choice = &v["choices"][0];
    let text =
        choice["message"]["content"].is_string() && choice["message"].get("tool_calls").is_none();
    assert_eq!(text, choice["finish_reason"] != "tool_calls", "{v}");
    text
}

#[tokio::test]
async fn rate_zero_and_tool_results_give_text() {
    let mut cfg = config();
    cfg.tools.call_rate = 0.0;
    let (zero, state) = app(cfg);
    let messages = json!([{"role": "user", "content": "hi"}]);
    assert!(is_text_answer(&zero, &chat_body(&messages, false)).await);
    assert_eq!(
        counter(&state, "inferscope_sim_tool_calls_total"),
        Some(0.0)
    );
    let (app, _) = app(config());
    let after = json!([{"role": "user", "content": "hi"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "search", "arguments": "{\"query\":\"hi\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "42"}]);
    assert!(is_text_answer(&app, &chat_body(&after, false)).await);
    let (_, text) = post(
        &app,
        "/v1/chat/completions",
        chat_body(&after, true).to_string(),
    )
    .await;
    assert!(!text.contains("tool_calls"), "{text}");
    // No tools: text, as ever.
    let plain = json!({"model": M, "messages": messages, "max_tokens": 3});
    assert!(is_text_answer(&app, &plain).await);
}

#[tokio::test]
async fn tool_calls_follow_the_predicted_draw() {
    let mut cfg = config();
    cfg.tools.call_rate = 0.5;
    let seed = cfg.tools.seed;
    let (app, _) = app(cfg);
    let mut kinds = [0, 0];
    for i in 0..16 {
        let messages = json!([{"role": "user", "content": format!("question {i}")}]);
        let parsed: Vec<Message> = serde_json::from_value(messages.clone()).unwrap();
        let call = tools::draw(seed, &parsed) < 0.5;
        let body = chat_body(&messages, false);
        assert_eq!(!is_text_answer(&app, &body).await, call, "request {i}");
        assert_eq!(
            !is_text_answer(&app, &body).await,
            call,
            "request {i} again"
        );
        kinds[usize::from(call)] += 1;
    }
    assert!(kinds[0] > 0 && kinds[1] > 0, "{kinds:?}");
}

#[tokio::test]
async fn reset_prefix_cache_makes_the_same_prompt_miss_again() {
    let (app, state) = app(config());
    let prompt = "the same long prompt word ".repeat(40);
    let body = json!({"model": M, "prompt": prompt, "max_tokens": 2});
    let hits = || counter(&state, "vllm:prefix_cache_hits_total").unwrap_or(0.0);
    for _ in 0..2 {
        assert_eq!(
            post_json(&app, "/v1/completions", &body).await.0,
            StatusCode::OK
        );
    }
    let warm = hits();
    assert!(
        warm >= 160.0,
        "the second request reused the first's blocks: {warm}"
    );
    assert_eq!(
        post(&app, "/reset_prefix_cache", "").await.0,
        StatusCode::OK
    );
    assert_eq!(
        post_json(&app, "/v1/completions", &body).await.0,
        StatusCode::OK
    );
    assert!(
        (hits() - warm).abs() < f64::EPSILON,
        "a miss after the reset"
    );
    assert_eq!(
        post_json(&app, "/v1/completions", &body).await.0,
        StatusCode::OK
    );
    assert!(hits() >= warm + 160.0, "cached again");
}

//! The simulator's HTTP API against an in-process server on an ephemeral port.

use crate::sim_common;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sim_common::*;

const M: &str = "inferscope-sim";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_and_completions_report_exact_usage() {
    let srv = start(profile("healthy")).await;
    let c = client();
    let (s, v) = post_json(&c, &format!("{}/v1/chat/completions", srv.url()), &json!({
        "model": M, "messages": [{"role": "user", "content": "Hello, world!"}], "max_tokens": 7, "seed": 3,
        "logprobs": true, "top_logprobs": 3,
    })).await;
    assert_eq!(s, 200, "{v}");
    // 3 framing + "user" + 4 content tokens + 3 priming (see the tokenizer's documentation).
    assert_eq!(v["usage"]["prompt_tokens"], 11);
    assert_eq!(v["usage"]["completion_tokens"], 7);
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    let text = v["choices"][0]["message"]["content"].as_str().unwrap();
    assert_eq!(inferscope::sim::tokenizer::count(text), 7);
    let lp = v["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert_eq!(lp.len(), 7);
    assert_eq!(lp[0]["top_logprobs"].as_array().unwrap().len(), 3);
    // Same seed, same text.
    let (_, v2) = post_json(&c, &format!("{}/v1/chat/completions", srv.url()), &json!({
        "model": M, "messages": [{"role": "user", "content": "Hello, world!"}], "max_tokens": 7, "seed": 3,
    })).await;
    assert_eq!(v2["choices"][0]["message"]["content"], text);
    // Without max_tokens the model stops on its own.
    let (_, v3) = post_json(
        &c,
        &format!("{}/v1/chat/completions", srv.url()),
        &json!({
            "model": M, "messages": [{"role": "user", "content": "Tell me"}],
        }),
    )
    .await;
    assert_eq!(v3["choices"][0]["finish_reason"], "stop");
    let n = v3["usage"]["completion_tokens"].as_u64().unwrap();
    assert!((16..256).contains(&n), "{n}");

    let (s, v) = post_json(
        &c,
        &format!("{}/v1/completions", srv.url()),
        &json!({
            "model": M, "prompt": "one two three", "logprobs": 2,
        }),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(v["usage"]["prompt_tokens"], 3);
    assert_eq!(
        v["usage"]["completion_tokens"], 16,
        "OpenAI's default max_tokens"
    );
    assert_eq!(
        v["choices"][0]["logprobs"]["tokens"]
            .as_array()
            .unwrap()
            .len(),
        16
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_sends_tokens_usage_and_done() {
    let srv = start(profile("healthy")).await;
    let c = client();
    let r = stream(
        &c,
        &format!("{}/v1/chat/completions", srv.url()),
        &json!({
            "model": M, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5,
            "stream": true, "stream_options": {"include_usage": true},
        }),
        None,
    )
    .await;
    assert_eq!(r.status, 200);
    let ev: Vec<&str> = r.events.iter().map(|(_, e)| e.as_str()).collect();
    assert_eq!(*ev.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = ev[..ev.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let tokens = chunks
        .iter()
        .filter(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .is_some_and(|s| !s.is_empty())
        })
        .count();
    assert_eq!(tokens, 5);
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"].as_array().unwrap().len(), 0);
    assert_eq!(usage["usage"]["completion_tokens"], 5);
    assert_eq!(
        chunks[chunks.len() - 2]["choices"][0]["finish_reason"],
        "length"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_openai_errors_and_never_crashes() {
    let srv = start(profile("healthy")).await;
    let c = client();
    let chat = format!("{}/v1/chat/completions", srv.url());
    let cases: Vec<(&str, u16)> = vec![
        ("{not json", 400),
        ("", 400),
        ("[1,2,3]", 400),
        (r#"{"model":"inferscope-sim"}"#, 400),
        (r#"{"model":"inferscope-sim","messages":"hello"}"#, 400),
        (
            r#"{"model":"inferscope-sim","messages":[{"role":"user","content":"x"}],"max_tokens":"lots"}"#,
            400,
        ),
        (
            r#"{"model":"inferscope-sim","messages":[{"role":"user","content":"x"}],"max_tokens":-5}"#,
            400,
        ),
        (
            r#"{"model":"inferscope-sim","messages":[{"role":"user","content":"x"}],"max_tokens":1000000000000}"#,
            400,
        ),
        (
            r#"{"model":"inferscope-sim","messages":[{"role":"user","content":"x"}],"max_tokens":0}"#,
            400,
        ),
        (
            r#"{"model":"inferscope-sim","messages":[{"role":"user","content":"x"}],"temperature":9}"#,
            400,
        ),
        (
            r#"{"model":"inferscope-sim","messages":[{"role":"user","content":"x"}],"stream":"yes"}"#,
            400,
        ),
        (
            r#"{"model":"inferscope-sim","messages":[{"role":"user","content":"x"}],"n":3}"#,
            400,
        ),
        (
            r#"{"model":"nope","messages":[{"role":"user","content":"x"}]}"#,
            404,
        ),
    ];
    for (body, want) in cases {
        let (s, b) = post(&c, &chat, body.to_owned()).await;
        assert_eq!(s, want, "{body} -> {b}");
        let v: Value = serde_json::from_str(&b).unwrap();
        assert!(v["error"]["message"].is_string(), "{b}");
        assert_eq!(v["error"]["code"], want);
    }
    let long = "word ".repeat(5000);
    let (s, b) = post_json(
        &c,
        &chat,
        &json!({"model": M, "messages": [{"role": "user", "content": long}]}),
    )
    .await;
    assert_eq!(s, 400, "{b}");
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .contains("maximum context length")
    );
    let (s, _) = get(&c, &format!("{}/v1/nothing", srv.url())).await;
    assert_eq!(s, 404);
    // Still healthy.
    assert_eq!(get(&c, &format!("{}/health", srv.url())).await.0, 200);
    let (s, _) = post_json(
        &c,
        &chat,
        &json!({"model": M, "messages": [{"role": "user", "content": "x"}], "max_tokens": 2}),
    )
    .await;
    assert_eq!(s, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_disconnect_mid_stream_frees_kv_blocks() {
    let srv = start(profile("healthy")).await;
    let c = client();
    let body = json!({"model": M, "prompt": "a long story ".repeat(40), "max_tokens": 3000, "stream": true});
    let r = stream(&c, &format!("{}/v1/completions", srv.url()), &body, Some(5)).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.events.len(), 5);
    // The request was running and held blocks when the client left...
    drop(r);
    // ...and the engine frees them once it notices.
    assert!(
        eventually(Duration::from_secs(5), || srv.kv_used_blocks() == 0).await,
        "KV blocks still held: {}",
        srv.kv_used_blocks()
    );
    let m = srv.metrics_text();
    assert!(metric(&m, "vllm:num_requests_running").abs() < f64::EPSILON);
    assert!(metric(&m, "vllm:kv_cache_usage_perc").abs() < f64::EPSILON);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_over_cap_answers_503() {
    let mut cfg = profile("queue-bound");
    cfg.engine.max_num_seqs = 1;
    cfg.engine.max_waiting = 2;
    let srv = start(cfg).await;
    let c = client();
    let url = format!("{}/v1/completions", srv.url());
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (c, url) = (c.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            post_json(
                &c,
                &url,
                &json!({"model": M, "prompt": "hi", "max_tokens": 100}),
            )
            .await
        }));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut codes = Vec::new();
    for t in tasks {
        let (s, v) = t.await.unwrap();
        if s == 503 {
            assert!(v["error"]["message"].as_str().unwrap().contains("queue"));
        }
        codes.push(s);
    }
    assert!(codes.contains(&200) && codes.contains(&503), "{codes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_memory_oom_fails_large_prefills_with_500() {
    let srv = start(profile("gpu-memory")).await;
    let c = client();
    let url = format!("{}/v1/completions", srv.url());
    let (s, v) = post_json(
        &c,
        &url,
        &json!({"model": M, "prompt": "x ".repeat(1500), "max_tokens": 4}),
    )
    .await;
    assert_eq!(s, 500, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("out of memory")
    );
    let (s, _) = post_json(
        &c,
        &url,
        &json!({"model": M, "prompt": "small prompt", "max_tokens": 4}),
    )
    .await;
    assert_eq!(s, 200);
    let m = srv.metrics_text();
    assert!(m.contains("vllm:request_success_total{finished_reason=\"length\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeddings_models_and_metrics() {
    let srv = start(profile("healthy")).await;
    let c = client();
    let (s, v) = post_json(
        &c,
        &format!("{}/v1/embeddings", srv.url()),
        &json!({"model": M, "input": ["a b", "c"]}),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(v["data"].as_array().unwrap().len(), 2);
    assert_eq!(v["data"][0]["embedding"].as_array().unwrap().len(), 64);
    assert_eq!(v["usage"]["prompt_tokens"], 3);
    let (_, m) = get(&c, &format!("{}/v1/models", srv.url())).await;
    assert!(m.contains(M));
    let (s, text) = get(&c, &format!("{}/metrics", srv.url())).await;
    assert_eq!(s, 200);
    for name in [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:num_preemptions_total",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:request_queue_time_seconds",
        "vllm:cache_config_info",
    ] {
        assert!(text.contains(&format!("# TYPE {name} ")), "{name}");
    }
    assert!(text.contains("num_gpu_blocks=\"4096\""));
    assert!(text.contains("model_name=\"inferscope-sim\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_errors_follow_the_rate() {
    let mut cfg = profile("healthy");
    cfg.faults.error_rate = 0.5;
    cfg.cost = inferscope::sim::config::CostModel::zero();
    let srv = start(cfg).await;
    let c = client();
    let mut errors = 0;
    for _ in 0..100 {
        let (s, _) = post_json(
            &c,
            &format!("{}/v1/completions", srv.url()),
            &json!({"model": M, "prompt": "x", "max_tokens": 1}),
        )
        .await;
        assert!(s == 200 || s == 500);
        errors += usize::from(s == 500);
    }
    assert!((25..75).contains(&errors), "{errors}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vector_search_exact_and_rebuild_spike() {
    let mut cfg = profile("healthy");
    cfg.vector.corpus_size = 1000;
    cfg.vector.rebuild_min_ms = 1500;
    let srv = start(cfg).await;
    let http = client();
    let search = format!("{}/v1/vector/search", srv.url());
    let exact = format!("{}/v1/vector/exact", srv.url());
    let query = json!({"text": "where is the cache", "top_k": 5, "ef_search": 128});
    let (status, approx) = post_json(&http, &search, &query).await;
    assert_eq!(status, 200, "{approx}");
    let (_, truth) = post_json(&http, &exact, &query).await;
    let ids = |v: &Value| {
        v["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["id"].as_u64().unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(&truth).len(), 5);
    let found = ids(&approx)
        .iter()
        .filter(|i| ids(&truth).contains(i))
        .count();
    assert!(found >= 4, "recall@5 {found}/5");
    let v: Vec<f32> = vec![0.0; 64];
    assert_eq!(
        post_json(&http, &search, &json!({"vector": v, "top_k": 3}))
            .await
            .0,
        200
    );
    assert_eq!(
        post_json(&http, &search, &json!({"vector": [1.0, 2.0], "top_k": 3}))
            .await
            .0,
        400
    );
    assert_eq!(post_json(&http, &search, &json!({"top_k": 3})).await.0, 400);
    assert_eq!(
        post_json(&http, &search, &json!({"text": "x", "top_k": 0}))
            .await
            .0,
        400
    );

    let t0 = Instant::now();
    let _ = post_json(&http, &search, &query).await;
    let normal = t0.elapsed();
    assert_eq!(
        post(&http, &format!("{}/v1/vector/rebuild", srv.url()), "")
            .await
            .0,
        202
    );
    assert_eq!(
        post(&http, &format!("{}/v1/vector/rebuild", srv.url()), "")
            .await
            .0,
        409
    );
    let t0 = Instant::now();
    let (s, _) = post_json(&http, &search, &query).await;
    let during = t0.elapsed();
    assert_eq!(s, 200);
    assert!(
        during >= Duration::from_millis(500),
        "no spike during rebuild: {during:?}"
    );
    assert!(normal < Duration::from_millis(200), "{normal:?}");
    let status = format!("{}/v1/vector/status", srv.url());
    loop {
        let (_, st) = get(&http, &status).await;
        let st: Value = serde_json::from_str(&st).unwrap();
        if st["rebuilding"] == false {
            assert_eq!(st["rebuilds"], 1);
            break;
        }
        assert!(t0.elapsed() < Duration::from_mins(1), "rebuild never ends");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let t0 = Instant::now();
    let _ = post_json(&http, &search, &query).await;
    assert!(
        t0.elapsed() < Duration::from_millis(400),
        "still slow after the rebuild"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_system_prompt_hits_the_prefix_cache() {
    let srv = start(profile("healthy")).await;
    let c = client();
    let system = "You are a helpful assistant who answers briefly. ".repeat(10);
    for q in ["first question", "second question"] {
        let (s, _) = post_json(&c, &format!("{}/v1/chat/completions", srv.url()), &json!({
            "model": M, "messages": [{"role": "system", "content": system}, {"role": "user", "content": q}], "max_tokens": 2,
        })).await;
        assert_eq!(s, 200);
    }
    let m = srv.metrics_text();
    let hits = metric(&m, "vllm:prefix_cache_hits_total");
    let queries = metric(&m, "vllm:prefix_cache_queries_total");
    // The second request reuses the full blocks of the shared system prompt (~90 tokens).
    assert!(hits >= 64.0, "hits {hits}");
    assert!(queries > hits);
}

//! Multi-turn conversations (what the server received, turn by turn), task checks and sTPS,
//! ICE from logprobs, and retries with the MSR of a server restarted mid-run. A recording chat server
//! (real HTTP and SSE, in process) keeps every request's `messages` and answers
//! `echo:<last user message>`, so each history can be checked against the answers given.

use std::{
    path::Path,
    sync::{Arc, Mutex},
};

use axum::{Json, Router, extract::State, response::IntoResponse, routing::post};
use inferscope::loadgen::{self, Options, Plan};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

type Seen = Arc<Mutex<Vec<Vec<Value>>>>;

async fn chat(State(seen): State<Seen>, Json(body): Json<Value>) -> impl IntoResponse {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let last = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string();
    seen.lock().unwrap().push(messages);
    let chunk = |content: &str| json!({"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": null}]});
    let done = json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                      "usage": {"prompt_tokens": 4, "completion_tokens": 2}});
    let sse = format!(
        "data: {}\n\ndata: {}\n\ndata: {done}\n\ndata: [DONE]\n\n",
        chunk("echo:"),
        chunk(&last)
    );
    ([("content-type", "text/event-stream")], sse)
}

async fn server() -> (String, Seen) {
    let seen: Seen = Arc::default();
    let app = Router::new()
        .route("/v1/chat/completions", post(chat))
        .with_state(seen.clone());
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    (format!("http://{addr}"), seen)
}

const SHAREGPT: &str = r#"[
 {"conversations": [{"from": "human", "value": "a1"}, {"from": "gpt", "value": "r a1"},
                    {"from": "human", "value": "a2"}, {"from": "gpt", "value": "r a2"},
                    {"from": "human", "value": "a3"}, {"from": "gpt", "value": "r a3"}]},
 {"conversations": [{"from": "system", "value": "ignored"},
                    {"from": "human", "value": "b1"}, {"from": "gpt", "value": "r b1"},
                    {"from": "human", "value": "b2"}, {"from": "gpt", "value": "r b2"}]}
]"#;

fn user(c: &str) -> Value {
    json!({"role": "user", "content": c})
}

fn assistant(c: &str) -> Value {
    json!({"role": "assistant", "content": c})
}

async fn run(yaml: &str, dir: &Path) -> (loadgen::StressReport, Vec<Vec<Value>>, Seen) {
    let (target, seen) = server().await;
    let yaml = yaml.replace("TARGET", &target);
    let s = Plan::from_yaml(&yaml, "conv.yaml", dir).unwrap();
    let r = loadgen::run(&s, Options::new(), CancellationToken::new())
        .await
        .unwrap();
    let got = seen.lock().unwrap().clone();
    (r, got, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharegpt_replayed_turn_by_turn_with_recorded_replies() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("chats.json"), SHAREGPT).unwrap();
    let yaml = "target: TARGET\nseed: 7\ndatasets: {chats: {path: chats.json}}\nphases:\n  - name: p\n    duration: 1s\n    load: {shape: concurrency, users: 1}\n    request: {dataset: chats, max_tokens: 8, conversation: {turns: 8, reply: recorded}}\n";
    let (r, got, _) = run(yaml, dir.path()).await;
    let a = [
        user("a1"),
        assistant("r a1"),
        user("a2"),
        assistant("r a2"),
        user("a3"),
    ];
    let b = [user("b1"), assistant("r b1"), user("b2")];
    // Every request is a conversation's history up to one of its user turns.
    let prefixes: Vec<&[Value]> = vec![&a[..1], &a[..3], &a[..5], &b[..1], &b[..3]];
    assert!(got.len() >= 10, "{} requests", got.len());
    for m in &got {
        assert!(prefixes.contains(&m.as_slice()), "unexpected history {m:?}");
    }
    // One user, one conversation at a time: a turn k+1 always follows turn k of the same one.
    for w in got.windows(2) {
        if w[1].len() > 1 {
            assert_eq!(w[1][..w[1].len() - 2], w[0][..], "{w:?}");
        }
    }
    let recs = &r.records;
    assert!(recs.iter().all(|x| x.turn.is_some() && x.error.is_none()));
    let lat = &r.phases[0].latency_ms;
    assert!(lat["ttft_first_turn"].count > 0 && lat["ttft_later_turns"].count > 0);
    assert_eq!(
        lat["ttft_first_turn"].count + lat["ttft_later_turns"].count,
        lat["ttft"].count
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synthetic_sessions_carry_the_model_answers_and_a_shared_system_prompt() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = "target: TARGET\nseed: 3\nphases:\n  - name: p\n    duration: 2s\n    load: {shape: constant, rate: 10}\n    request:\n      prompt: 'question ${seq} ${choice(x,y,z)}'\n      max_tokens: 4\n      conversation: {turns: 3, think_time: 50ms, system_prompt_words: 40}\n";
    let (r, got, _) = run(yaml, dir.path()).await;
    let system = got[0][0].clone();
    assert_eq!(system["role"], "system");
    assert_eq!(system["content"].as_str().unwrap().split(' ').count(), 40);
    let mut by_len = [0usize; 8];
    for m in &got {
        // The same system prompt first, then user/assistant pairs, each answer the echo of
        // the user message before it: the history holds what the server said.
        assert_eq!(m[0], system, "{m:?}");
        for pair in m[1..].chunks(2) {
            if let [u, a] = pair {
                let said = format!("echo:{}", u["content"].as_str().unwrap());
                assert_eq!(a, &assistant(&said), "{m:?}");
            }
        }
        by_len[m.len()] += 1;
    }
    // 20 conversations of 3 turns (2, 4, 6 messages), the last ones cut by the phase's end.
    assert!(
        (18..=21).contains(&by_len[2]),
        "conversations started: {by_len:?}"
    );
    assert!(
        by_len[4] >= by_len[2] - 2 && by_len[6] >= by_len[2] - 3,
        "{by_len:?}"
    );
    // Every turn counts as scheduled: nothing looks dropped.
    let p = &r.phases[0];
    assert_eq!(p.counts.dropped, 0);
    assert_eq!(p.counts.finished, got.len() as u64);
    assert!(p.counts.scheduled >= p.counts.finished, "{:?}", p.counts);
    let turns: Vec<u32> = r.records.iter().filter_map(|x| x.turn).collect();
    assert_eq!(turns.len(), got.len());
    assert!(turns.contains(&3));
}

#[test]
fn conversations_refuse_what_they_cannot_do() {
    let dir = tempfile::tempdir().unwrap();
    for (request, want) in [
        (
            "{endpoint: completions, conversation: {turns: 2}}",
            "needs `endpoint: chat`",
        ),
        ("{conversation: {turns: 0}}", "turns must be 1..=1000"),
        (
            "{conversation: {reply: recorded}}",
            "`reply: recorded` needs a ShareGPT dataset",
        ),
    ] {
        let yaml = format!(
            "target: http://127.0.0.1:9\nphases:\n  - name: p\n    duration: 1s\n    load: {{shape: constant, rate: 1}}\n    request: {request}\n"
        );
        let e = Plan::from_yaml(&yaml, "c.yaml", dir.path())
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{request}: {e}");
    }
}

/// The sim (real HTTP, in process) for the checks and the logprobs.
async fn sim() -> (String, inferscope::sim::SimServer) {
    let mut cfg = inferscope::sim::profile("healthy").unwrap();
    cfg.vector.corpus_size = 10;
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let sim = inferscope::sim::start(cfg, l).await.unwrap();
    (format!("http://{}", sim.addr()), sim)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_give_semantic_throughput_and_logprobs_give_ice() {
    let (target, sim) = sim().await;
    let yaml = format!(
        "target: {target}\nseed: 5\nphases:
  - name: answers
    duration: 2s
    load: {{shape: constant, rate: 10}}
    request: {{model: inferscope-sim, max_tokens: 8, check: {{regex: '\\S', max_latency: 10s}}}}
    slo: ['stps > 5', 'task_success_rate >= 99%']
  - name: never
    duration: 2s
    load: {{shape: constant, rate: 10}}
    request: {{model: inferscope-sim, max_tokens: 8, check: {{contains: [never-said-by-the-sim]}}}}
  - name: chats
    duration: 3s
    load: {{shape: concurrency, users: 2}}
    request: {{model: inferscope-sim, max_tokens: 6, conversation: {{turns: 3, logprobs: 5}}}}
"
    );
    let s = Plan::from_yaml(&yaml, "s.yaml", Path::new(".")).unwrap();
    let r = loadgen::run(&s, Options::new(), CancellationToken::new())
        .await
        .unwrap();
    let (answers, never, chats) = (&r.phases[0], &r.phases[1], &r.phases[2]);
    // Every answer has a non-space character: sTPS is the request rate.
    assert_eq!(answers.tasks, 20, "{:?}", answers.counts);
    assert_eq!(answers.tasks_succeeded, 20);
    assert!((answers.semantic_tasks_per_s - 10.0).abs() < 1.0);
    assert!(answers.slo.iter().all(|s| s.pass), "{:?}", answers.slo);
    assert!(answers.tokens_per_s > answers.output_tokens_per_s);
    // Requests that succeed but fail the check are not semantic throughput.
    assert_eq!((never.tasks, never.tasks_succeeded), (20, 0));
    assert!(never.error_rate < 1e-12 && never.semantic_tasks_per_s < 1e-12);
    // Conversations: a task per finished conversation, an ICE per conversation.
    assert!(
        chats.tasks >= 2 && chats.tasks_succeeded == chats.tasks,
        "{chats:?}"
    );
    assert!(chats.ice.count >= 2, "{:?}", chats.ice);
    assert!(chats.ice.max.is_finite() && chats.ice.p50 >= 0.0);
    let with_entropy = r
        .records
        .iter()
        .filter(|x| x.phase == 2 && x.entropy.is_some_and(|h| h > 0.0))
        .count();
    assert!(with_entropy >= 6, "{with_entropy}");
    sim.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restarted_mid_run_gives_a_failover_time_and_an_msr() {
    let mut cfg = inferscope::sim::profile("healthy").unwrap();
    cfg.vector.corpus_size = 10;
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let first = inferscope::sim::start(cfg.clone(), l).await.unwrap();
    let yaml = format!(
        "target: http://{addr}\ntimeout: 2s\nseed: 1\nphases:
  - name: p
    duration: 3s
    load: {{shape: constant, rate: 20}}
    request: {{model: inferscope-sim, max_tokens: 4, retry: {{max: 6, backoff: 100ms}}}}
"
    );
    let s = Plan::from_yaml(&yaml, "r.yaml", Path::new(".")).unwrap();
    let run =
        tokio::spawn(
            async move { loadgen::run(&s, Options::new(), CancellationToken::new()).await },
        );
    // Down from 1.0 s to 1.5 s of the run.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    first.shutdown().await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let l = tokio::net::TcpListener::bind(addr).await.unwrap();
    let second = inferscope::sim::start(cfg, l).await.unwrap();
    let r = run.await.unwrap().unwrap();
    second.shutdown().await.unwrap();
    let p = &r.phases[0];
    let res = p
        .resilience
        .as_ref()
        .expect("a phase with a retry policy reports resilience");
    assert!(res.outages >= 1 && !res.unrecovered, "{res:?}");
    // The outage lasted about the 500 ms the server was away.
    assert!((300.0..1500.0).contains(&res.failover_ms), "{res:?}");
    assert!(res.retries > 0 && res.retries_succeeded > 0, "{res:?}");
    let want = (1.0 - res.failover_ms / 800.0).clamp(0.0, 1.0) * res.r_retry;
    assert!((res.msr - want).abs() < 1e-9, "{res:?}");
    assert_eq!(
        res.grade,
        inferscope::measure::resilience::Grade::of(res.msr)
    );
    // First attempts alone are the phase's requests; every task ended in a success.
    assert_eq!(p.counts.finished, 60, "{:?}", p.counts);
    assert_eq!(p.tasks, 60);
    assert_eq!(p.tasks_succeeded, 60, "{res:?} {:?}", p.counts);
    assert!(p.error_rate > 0.0);
    let retries = r
        .records
        .iter()
        .filter(|x| x.attempt.is_some_and(|a| a > 1))
        .count();
    assert_eq!(retries as u64, res.retries);
}

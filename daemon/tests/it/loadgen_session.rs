//! Agentic sessions (`request.session`) against the sim (in process, fixed timing: TTFT 40 ms,
//! ITL 5 ms) behind a counting proxy that holds how many chat requests were in flight at once.
//! Per session: tool wait, model time and think time add up to its end-to-end time with
//! little left for the client; each call's context grows by what the plan adds (its answer,
//! the tool's result, the sub-agents' results); the sub-agents ran together at the server;
//! compaction keeps every call under the limit. The example file parses.

use std::{
    collections::BTreeMap,
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

use axum::{
    Router,
    body::Body,
    extract::{Request, State},
    response::Response,
    routing::post,
};
use bytes::Bytes;
use futures_util::StreamExt as _;
use http_body_util::{BodyExt as _, Full};
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector},
    rt::TokioExecutor,
};
use inferscope::loadgen::{self, Options, Plan};
use inferscope::measure::{
    RequestRecord,
    session::{SessionOutcome, SessionRecord},
};
use tokio_util::sync::CancellationToken;

/// Chat requests in flight at the proxy, and the most at once.
#[derive(Default)]
struct Count {
    now: AtomicUsize,
    most: AtomicUsize,
}

/// Leaves the count when the answer's body is done (or dropped).
struct Held(Arc<Count>);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::SeqCst);
    }
}

struct Proxy {
    upstream: String,
    client: Client<HttpConnector, Full<Bytes>>,
    count: Arc<Count>,
}

async fn forward(State(p): State<Arc<Proxy>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    let now = p.count.now.fetch_add(1, Ordering::SeqCst) + 1;
    p.count.most.fetch_max(now, Ordering::SeqCst);
    let held = Held(p.count.clone());
    let up = hyper::Request::post(format!("{}{}", p.upstream, parts.uri.path()))
        .header("content-type", "application/json")
        .body(Full::new(body))
        .unwrap();
    let resp = p.client.request(up).await.unwrap();
    let (parts, body) = resp.into_parts();
    let stream = body.into_data_stream().map(move |chunk| {
        let _held = &held;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(stream))
}

/// The sim behind the counting proxy: the proxy's URL, the count, the sim.
async fn sim_behind_proxy() -> (String, Arc<Count>, inferscope::sim::SimServer) {
    let mut cfg = inferscope::sim::profile("healthy").unwrap();
    cfg.vector.corpus_size = 10;
    cfg.fixed = Some(inferscope::sim::config::FixedTiming {
        ttft_ms: 40.0,
        itl_ms: 5.0,
    });
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let sim = inferscope::sim::start(cfg, l).await.unwrap();
    let count = Arc::new(Count::default());
    let proxy = Arc::new(Proxy {
        upstream: format!("http://{}", sim.addr()),
        client: Client::builder(TokioExecutor::new()).build_http(),
        count: count.clone(),
    });
    let app = Router::new()
        .route("/v1/chat/completions", post(forward))
        .with_state(proxy);
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    (format!("http://{addr}"), count, sim)
}

const SCENARIO: &str = "target: TARGET
seed: 11
timeout: 10s
phases:
  - name: agents
    duration: 5s
    load: {shape: concurrency, users: 1}
    request:
      model: inferscope-sim
      max_tokens: 8
      session:
        system_prompt_tokens: 50
        task_tokens: 20
        steps:
          - llm: {}
          - tool: {name: search, wait: 150ms, result_tokens: 60}
          - llm: {}
          - agents:
              count: 3
              task_tokens: 10
              steps:
                - llm: {max_tokens: 6}
                - tool: {wait: 100ms, result_tokens: 30}
                - llm: {max_tokens: 6}
          - think: 100ms
          - llm: {max_tokens: 12}
  - name: compaction
    duration: 4s
    load: {shape: poisson, rate: 2}
    request:
      model: inferscope-sim
      max_tokens: 8
      session:
        task_tokens: 20
        context_limit: 150
        compaction: {summary: 16}
        steps:
          - repeat:
              times: 4
              steps:
                - llm: {}
                - tool: {wait: 20ms, result_tokens: 50}
          - llm: {}
";

/// A session's calls by agent, each agent's in the order sent.
fn calls_of<'a>(
    records: &'a [RequestRecord],
    s: &SessionRecord,
) -> BTreeMap<u32, Vec<&'a RequestRecord>> {
    let mut by: BTreeMap<u32, Vec<&RequestRecord>> = BTreeMap::new();
    for r in records
        .iter()
        .filter(|r| r.session.is_some_and(|c| c.id == s.id))
    {
        by.entry(r.session.unwrap().agent).or_default().push(r);
    }
    for calls in by.values_mut() {
        calls.sort_by_key(|r| r.turn);
    }
    by
}

fn context(r: &RequestRecord) -> u32 {
    r.session.unwrap().context_tokens
}

fn out(r: &RequestRecord) -> u32 {
    r.output_tokens.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_add_up_grow_their_context_and_run_sub_agents_together() {
    let (target, count, sim) = sim_behind_proxy().await;
    let plan = Plan::from_yaml(
        &SCENARIO.replace("TARGET", &target),
        "s.yaml",
        Path::new("."),
    )
    .unwrap();
    let r = loadgen::run(&plan, Options::new(), CancellationToken::new())
        .await
        .unwrap();
    let agents = &r.phases[0];
    let v = agents.sessions.as_ref().expect("a sessions view");
    println!("{}", r.table());
    assert!(v.completed >= 4 && v.failed == 0, "{v:?}");
    assert_eq!(agents.counts.errors.len(), 0, "{:?}", agents.counts);
    // Every call is a request of the phase; a session is a task.
    assert_eq!(
        agents.counts.finished,
        v.completed * 9 + calls_of_cut(&r.records, v)
    );
    assert_eq!(agents.tasks, v.completed + v.failed);
    let done: Vec<&SessionRecord> = v
        .records
        .iter()
        .filter(|s| s.outcome == SessionOutcome::Completed)
        .collect();
    for s in &done {
        check_agents_session(&r.records, s);
    }
    // The sub-agents overlapped at the server too: one user ran one session at a time, so
    // only sub-agents could.
    println!(
        "most chat requests in flight at the server: {}",
        count.most.load(Ordering::SeqCst)
    );
    assert!(count.most.load(Ordering::SeqCst) >= 3);
    let depth_1 = r
        .records
        .iter()
        .filter(|x| x.phase == 0 && x.session.is_some_and(|c| c.depth == 1))
        .count() as u64;
    assert_eq!(v.depth["1"].calls, depth_1);
    check_compaction(&r);
    let table = r.table();
    assert!(
        table.contains("sessions: ") && table.contains("time: model "),
        "{table}"
    );
    let json = serde_json::to_value(&r).unwrap();
    assert!(
        json["phases"][0]["sessions"]["model"]["share_of_e2e"]
            .as_f64()
            .unwrap()
            > 0.3
    );
    assert!(
        json["records"][0]["session"]["context_tokens"]
            .as_u64()
            .is_some()
    );
    sim.shutdown().await.unwrap();
}

/// Calls of the phase's cut sessions (they finished too).
fn calls_of_cut(records: &[RequestRecord], v: &inferscope::measure::session::SessionsView) -> u64 {
    v.records
        .iter()
        .filter(|s| s.outcome != SessionOutcome::Completed)
        .map(|s| calls_of(records, s).values().map(Vec::len).sum::<usize>() as u64)
        .sum()
}

#[test]
fn agentic_session_example_parses() {
    use inferscope::loadgen::scenario::{overrides::Overrides, session::Step};
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/agentic-sessions.yaml");
    let plan = Plan::from_file(&path, &Overrides::default()).unwrap();
    let phases = &plan.scenario().phases;
    assert!(phases.len() >= 2);
    for p in phases {
        let s = p.request.session.as_ref().expect("a session phase");
        assert!(
            s.steps.iter().any(|s| matches!(s, Step::Agents(_))),
            "{}",
            p.name
        );
    }
}

/// One completed session of the `agents` phase: its parts, its calls' contexts, its model
/// time and its sub-agents' overlap.
fn check_agents_session(records: &[RequestRecord], s: &SessionRecord) {
    let p = s.parts;
    let e2e = s.e2e_us();
    println!(
        "session {}: e2e {e2e} µs = model {} + tools {} + think {} + client {}",
        s.id, p.model_us, p.tools_us, p.think_us, p.client_us
    );
    assert_eq!(
        p.model_us + p.tools_us + p.think_us + p.client_us,
        e2e,
        "{s:?}"
    );
    // The critical path's tools: the main agent's 150 ms and one sub-agent's 100 ms.
    assert!((250_000..290_000).contains(&p.tools_us), "{s:?}");
    assert!((100_000..140_000).contains(&p.think_us), "{s:?}");
    // Little is left for the client between steps (2 cores shared with the sim).
    assert!(
        p.client_us * 10 < e2e,
        "client {} of {e2e} µs: {s:?}",
        p.client_us
    );
    let by = calls_of(records, s);
    assert_eq!(by.len(), 4, "the main agent and 3 sub-agents: {by:?}");
    assert_eq!((s.calls, s.tool_calls, s.subagents), (9, 4, 3));
    // The main agent's context: the system prompt and task (70), then + its answer and
    // the tool's 60, then + its answer and the three sub-agents' last answers.
    let main = &by[&0];
    let subs: Vec<&Vec<&RequestRecord>> = by.range(1..).map(|(_, c)| c).collect();
    let ctx: Vec<u32> = main.iter().map(|r| context(r)).collect();
    let joined: u32 = subs.iter().map(|c| out(c.last().unwrap())).sum();
    assert_eq!(
        ctx,
        [
            70,
            70 + out(main[0]) + 60,
            70 + out(main[0]) + 60 + out(main[1]) + joined,
        ],
        "{s:?}"
    );
    assert_eq!(joined, 18);
    for sub in &subs {
        let c: Vec<u32> = sub.iter().map(|r| context(r)).collect();
        assert_eq!(c, [60, 60 + out(sub[0]) + 30]);
        assert!(sub.iter().all(|r| r.session.unwrap().depth == 1));
    }
    // The server counted the same prompts, with its chat framing on top.
    for r in by.values().flatten() {
        let framing = r.input_tokens.unwrap() - context(r);
        assert!((1..=60).contains(&framing), "{r:?}");
    }
    // Model time: the main agent's calls and the slowest sub-agent's, send to last token.
    let busy = |c: &[&RequestRecord]| c.iter().map(|r| r.end_us - r.actual_us).sum::<u64>();
    let slowest = subs.iter().map(|c| busy(c)).max().unwrap();
    let model = busy(main) + slowest;
    assert!(
        p.model_us.abs_diff(model) < 20_000,
        "{} vs {model}: {s:?}",
        p.model_us
    );
    // The sub-agents' first calls overlapped at the client.
    let firsts: Vec<&RequestRecord> = subs.iter().map(|c| c[0]).collect();
    let start = firsts.iter().map(|r| r.actual_us).max().unwrap();
    let end = firsts.iter().map(|r| r.end_us).min().unwrap();
    assert!(start < end, "{firsts:?}");
}

/// The `compaction` phase: every call under the limit; each completed session summarised
/// twice, its contexts as the plan says.
fn check_compaction(r: &loadgen::StressReport) {
    let compaction = &r.phases[1];
    // Compaction: every call under the limit; each completed session summarised twice.
    let c = compaction.sessions.as_ref().expect("sessions");
    assert!(c.completed >= 3, "{c:?}");
    let mine = r.records.iter().filter(|x| x.phase == 1);
    assert!(mine.clone().all(|x| context(x) <= 150), "{:?}", c.depth);
    for s in c
        .records
        .iter()
        .filter(|s| s.outcome == SessionOutcome::Completed)
    {
        assert_eq!((s.calls, s.compactions), (7, 2), "{s:?}");
        let by = calls_of(&r.records, s);
        let calls = &by[&0];
        let ctx: Vec<(u32, bool)> = calls
            .iter()
            .map(|r| (context(r), r.session.unwrap().compaction))
            .collect();
        assert_eq!(
            ctx,
            [
                (20, false),
                (78, false),
                (136, false),
                (145, true),
                (94, false),
                (103, true),
                (94, false)
            ],
            "{s:?}"
        );
    }
    assert_eq!(compaction.counts.errors.len(), 0, "{:?}", compaction.counts);
}

//! The session plan run against a backend that answers in virtual time: the context each call
//! sends, compaction, sub-agents' fan-out and join, and the parts of a session's time.

use std::{
    sync::{
        Mutex,
        atomic::{AtomicU32, Ordering},
    },
    time::Duration,
};

use rand::{SeedableRng as _, rngs::SmallRng};
use serde_json::Value;
use tokio::time::Instant;

use super::{
    agent::{Agent, Backend, Call, Finished, Reply, Setup, Stop},
    history::{Entry, filler},
};
use crate::loadgen::scenario::session::SessionSpec;
use crate::measure::record::SessionCall;

const MODEL: Duration = Duration::from_millis(100);
const ANSWER: u32 = 8;

/// Answers every call after [`MODEL`] with [`ANSWER`] tokens, and remembers each.
struct Fake {
    end: Instant,
    /// The call (1-based, in order of sending) that fails.
    fail: Option<u32>,
    sent: AtomicU32,
    in_flight: AtomicU32,
    most: AtomicU32,
    calls: Mutex<Vec<Sent>>,
}

/// A call as the fake saw it: its session side, its `max_tokens` and its messages.
type Sent = (SessionCall, Option<u32>, Vec<Value>);

impl Fake {
    fn new(phase: Duration) -> Self {
        Self {
            end: Instant::now() + phase,
            fail: None,
            sent: AtomicU32::new(0),
            in_flight: AtomicU32::new(0),
            most: AtomicU32::new(0),
            calls: Mutex::new(Vec::new()),
        }
    }

    fn calls(&self) -> Vec<Sent> {
        self.calls.lock().unwrap().clone()
    }
}

impl Backend for Fake {
    async fn llm(&self, call: Call) -> Option<Reply> {
        if Instant::now() >= self.end {
            return None;
        }
        let n = self.sent.fetch_add(1, Ordering::Relaxed) + 1;
        let sent = Instant::now();
        let now = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        self.most.fetch_max(now, Ordering::Relaxed);
        tokio::time::sleep(MODEL).await;
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        let tokens = call.max_tokens.unwrap_or(ANSWER).min(ANSWER);
        self.calls
            .lock()
            .unwrap()
            .push((call.meta, call.max_tokens, call.messages));
        Some(Reply {
            id: u64::from(n),
            ok: self.fail != Some(n),
            passed: true,
            text: Some(filler(tokens, u64::from(n))),
            input_tokens: Some(call.meta.context_tokens),
            output_tokens: Some(tokens),
            sent,
        })
    }

    async fn fetch(&self, _url: &str, body: String) -> Result<String, Stop> {
        tokio::time::sleep(Duration::from_millis(30)).await;
        Ok(format!("found {body}"))
    }

    async fn wait(&self, d: Duration) -> bool {
        if Instant::now() + d >= self.end {
            return false;
        }
        tokio::time::sleep(d).await;
        true
    }
}

fn spec(yaml: &str) -> SessionSpec {
    serde_norway::from_str(yaml).unwrap()
}

/// Runs `spec`'s main agent on `io` (a task of 10 tokens): how it ended and its E2E.
async fn run(io: &Fake, spec: &SessionSpec) -> (Finished, Duration) {
    let setup = Setup {
        spec,
        system: (spec.system_prompt_tokens > 0).then(|| {
            let n = spec.system_prompt_tokens;
            (std::sync::Arc::from(filler(n, 0).as_str()), n)
        }),
        max_tokens: None,
        session: 42,
        next_agent: AtomicU32::new(1),
    };
    let due = Instant::now();
    let task = Entry::user(filler(10, 1), 10);
    let main = Agent::main(io, &setup, SmallRng::seed_from_u64(1), task, due);
    let done = main.run(&spec.steps).await;
    let e2e = done.end - due;
    (done, e2e)
}

fn contexts(io: &Fake, depth: u32) -> Vec<u32> {
    io.calls()
        .iter()
        .filter(|(c, _, _)| c.depth == depth)
        .map(|(c, _, _)| c.context_tokens)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn the_context_grows_by_each_answer_and_tool_result_and_the_parts_add_up() {
    let io = Fake::new(Duration::from_mins(1));
    let s = spec(
        "system_prompt_tokens: 20\nsteps:\n  - llm: {}\n  - tool: {wait: 200ms, result_tokens: 50}\n  - llm: {}\n  - think: 300ms\n  - tool: {wait: {uniform: [100ms, 100ms]}, result_tokens: [50, 50]}\n  - llm: {}\n  - llm: {max_tokens: 3}\n",
    );
    let (done, e2e) = run(&io, &s).await;
    assert!(done.result.is_ok(), "{:?}", done.result);
    // 20 + 10; + answer 8 + result 50; + answer 8 + result 50; + answer 8 + `Continue.` 1.
    assert_eq!(contexts(&io, 0), [30, 88, 146, 155]);
    let calls = io.calls();
    assert_eq!(calls[3].1, Some(3));
    // Every call sends the system prompt, then the task with what followed it.
    for (_, _, m) in &calls {
        assert_eq!(m[0]["role"], "system");
        assert_eq!(m[1]["role"], "user");
    }
    assert_eq!(calls[3].2.last().unwrap()["content"], "Continue.");
    assert_eq!(done.spent.model, MODEL * 4);
    assert_eq!(done.spent.tools, Duration::from_millis(300));
    assert_eq!(done.spent.think, Duration::from_millis(300));
    assert_eq!(e2e, done.spent.model + done.spent.tools + done.spent.think);
    let c = done.counts;
    assert_eq!((c.calls, c.tool_calls, c.subagents), (4, 2, 0));
    assert_eq!(c.output_tokens, 3 * 8 + 3);
    assert_eq!(c.max_context, 155);
    assert_eq!(done.result.unwrap().tokens, 3);
}

#[tokio::test(start_paused = true)]
async fn sub_agents_run_together_and_their_results_join_the_parent() {
    let io = Fake::new(Duration::from_mins(1));
    let s = spec(
        "system_prompt_tokens: 20\nsteps:\n  - llm: {}\n  - agents:\n      count: 3\n      task_tokens: 5\n      steps:\n        - llm: {}\n        - tool: {wait: 50ms, result_tokens: 20}\n        - llm: {}\n  - llm: {}\n  - agents:\n      count: 2\n      task_tokens: 5\n      result_tokens: 100\n      steps: [{llm: {}}]\n  - llm: {}\n",
    );
    let (done, e2e) = run(&io, &s).await;
    assert!(done.result.is_ok(), "{:?}", done.result);
    assert_eq!(io.most.load(Ordering::Relaxed), 3, "the sub-agents overlap");
    // Each sub-agent: 20 + 5, then + answer 8 + result 20.
    assert_eq!(contexts(&io, 1), [25, 25, 25, 53, 53, 53, 25, 25]);
    // The parent: 30; + its answer 8 + three answers of 8; + 8 + two results of 100.
    assert_eq!(contexts(&io, 0), [30, 62, 270]);
    let agents: std::collections::BTreeSet<u32> =
        io.calls().iter().map(|(c, _, _)| c.agent).collect();
    assert_eq!(agents.into_iter().collect::<Vec<_>>(), [0, 1, 2, 3, 4, 5]);
    assert!(io.calls().iter().all(|(c, _, _)| c.id == 42));
    // The critical path: the parent's 3 calls, one sub-agent's 2 calls and tool, the second
    // fan-out's one call; nothing else.
    assert_eq!(done.spent.model, MODEL * 6);
    assert_eq!(done.spent.tools, Duration::from_millis(50));
    assert_eq!(e2e, done.spent.model + done.spent.tools);
    let c = done.counts;
    assert_eq!((c.calls, c.tool_calls, c.subagents), (3 + 6 + 2, 3, 5));
}

#[tokio::test(start_paused = true)]
async fn compaction_drops_or_summarises_the_oldest_turns() {
    let steps = "steps:\n  - repeat:\n      times: 4\n      steps:\n        - llm: {}\n        - tool: {wait: 10ms, result_tokens: 40}\n  - llm: {}\n";
    let io = Fake::new(Duration::from_mins(1));
    let (done, _) = run(&io, &spec(&format!("context_limit: 100\n{steps}"))).await;
    assert!(done.result.is_ok());
    // 10, 58, 106 -> over 100: the oldest answer and result go (48), then 58 again ...
    assert_eq!(contexts(&io, 0), [10, 58, 58, 58, 58]);
    assert_eq!(done.counts.compactions, 3);
    let io = Fake::new(Duration::from_mins(1));
    let (done, _) = run(
        &io,
        &spec(&format!(
            "context_limit: 100\ncompaction: {{summary: 6}}\n{steps}"
        )),
    )
    .await;
    assert!(done.result.is_ok());
    let calls = io.calls();
    let summaries: Vec<_> = calls.iter().filter(|(c, _, _)| c.compaction).collect();
    assert_eq!(summaries.len(), done.counts.compactions as usize);
    assert!(!summaries.is_empty());
    // The summary call is asked for its length, and holds the turns it replaces.
    assert_eq!(summaries[0].1, Some(6));
    assert_eq!(summaries[0].0.context_tokens, 10 + 48 + 9);
    // After it, the context is the task, the 6-token summary and the newest turn.
    let after = calls
        .iter()
        .position(|(c, _, _)| c.compaction)
        .map(|i| calls[i + 1].0.context_tokens);
    assert_eq!(after, Some(10 + 6 + 48));
    assert!(contexts(&io, 0).iter().all(|&n| n <= 100));
    assert_eq!(done.counts.calls, 5 + done.counts.compactions);
}

#[tokio::test(start_paused = true)]
async fn a_failed_call_fails_the_session_and_the_phase_end_cuts_it() {
    let s = spec(
        "steps:\n  - llm: {}\n  - agents: {count: 2, steps: [{llm: {}}, {llm: {}}]}\n  - llm: {}\n",
    );
    let mut io = Fake::new(Duration::from_mins(1));
    io.fail = Some(2);
    let (done, _) = run(&io, &s).await;
    let Err(Stop::Failed(why)) = done.result else {
        panic!("{:?}", done.result)
    };
    assert!(why.starts_with("LLM call 2 (agent "), "{why}");
    // The other sub-agent ran to its end; the parent's last call was not sent.
    assert_eq!(done.counts.calls, 1 + 1 + 2);
    let io = Fake::new(Duration::from_millis(250));
    let (done, _) = run(&io, &s).await;
    assert_eq!(done.result, Err(Stop::Cut));
    let io = Fake::new(Duration::from_millis(250));
    let (done, _) = run(&io, &spec("steps: [{llm: {}}, {think: 1s}, {llm: {}}]")).await;
    assert_eq!(done.result, Err(Stop::Cut));
    assert_eq!(done.counts.calls, 1);
}

//! One agent of a session running its steps: LLM calls on its history, tools, think time,
//! sub-agents started together and joined, repeats, and compaction before a call whose
//! context is over the limit. What it talks to is a [`Backend`] (the engine's, or a test's).
//!
//! Time is cut along the critical path: an agent's own calls, tools and think steps, and at
//! each join the parts of the sub-agent that finished last (the one the parent waited for).

use std::{
    sync::atomic::{AtomicU32, Ordering},
    time::Duration,
};

use futures_util::future::{BoxFuture, join_all};
use rand::{RngCore as _, SeedableRng as _, rngs::SmallRng};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::history::{Entry, History, System, count, filler};
use crate::loadgen::scenario::session::{AgentsStep, Compaction, SessionSpec, Step, ToolStep};
use crate::measure::record::SessionCall;

/// Words of the last answer a tool is asked about.
const QUERY_WORDS: usize = 24;

/// What an agent talks to.
pub trait Backend: Sync {
    /// Sends one LLM call; `None` when it was not sent (the phase ended, a cap dropped it, the
    /// run stopped): the session is cut.
    fn llm(&self, call: Call) -> impl Future<Output = Option<Reply>> + Send;
    /// POSTs `body` to the tool endpoint `url`: its answer's text.
    fn fetch(&self, url: &str, body: String) -> impl Future<Output = Result<String, Stop>> + Send;
    /// Waits `d`; `false` when the phase ends first (the session is cut).
    fn wait(&self, d: Duration) -> impl Future<Output = bool> + Send;
}

/// One LLM call to send.
#[derive(Debug)]
pub struct Call {
    /// The messages.
    pub messages: Vec<Value>,
    /// `max_tokens`.
    pub max_tokens: Option<u32>,
    /// Its session, agent, depth and context length.
    pub meta: SessionCall,
    /// Its 1-based number among its agent's calls.
    pub turn: u32,
    /// When it was due (the session's arrival for its first call).
    pub due: Instant,
    /// Seeds what the request's templates draw (a temperature).
    pub seed: u64,
}

/// How a call ended.
#[derive(Debug)]
pub struct Reply {
    /// Its record's id.
    pub id: u64,
    /// It succeeded.
    pub ok: bool,
    /// And its answer passed the phase's check (if any).
    pub passed: bool,
    /// The answer's text.
    pub text: Option<String>,
    /// Prompt tokens, the server's count.
    pub input_tokens: Option<u32>,
    /// Output tokens.
    pub output_tokens: Option<u32>,
    /// When it was sent (after the caps).
    pub sent: Instant,
}

/// Why an agent stopped before its last step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// A call or a tool failed: why.
    Failed(String),
    /// The phase ended, a cap dropped a call, or the run stopped.
    Cut,
}

/// Time spent on the critical path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spent {
    /// In LLM calls, each from its send to its last token.
    pub model: Duration,
    /// In tools.
    pub tools: Duration,
    /// Thinking.
    pub think: Duration,
}

impl std::ops::AddAssign for Spent {
    fn add_assign(&mut self, o: Self) {
        self.model += o.model;
        self.tools += o.tools;
        self.think += o.think;
    }
}

/// What an agent and its sub-agents did, all of them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// LLM calls answered (ok or not).
    pub calls: u32,
    /// Tool calls.
    pub tool_calls: u32,
    /// Sub-agents started.
    pub subagents: u32,
    /// Compactions.
    pub compactions: u32,
    /// Prompt tokens (server).
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// The longest context sent.
    pub max_context: u32,
    /// An answer failed the phase's check.
    pub check_failed: bool,
}

impl std::ops::AddAssign for Counts {
    fn add_assign(&mut self, o: Self) {
        self.calls += o.calls;
        self.tool_calls += o.tool_calls;
        self.subagents += o.subagents;
        self.compactions += o.compactions;
        self.input_tokens += o.input_tokens;
        self.output_tokens += o.output_tokens;
        self.max_context = self.max_context.max(o.max_context);
        self.check_failed |= o.check_failed;
    }
}

/// What every agent of one session shares.
pub struct Setup<'a> {
    /// The session's description.
    pub spec: &'a SessionSpec,
    /// The system prompt.
    pub system: System,
    /// `max_tokens` of an `llm` step that names none.
    pub max_tokens: Option<u32>,
    /// The session's id.
    pub session: u64,
    /// The next sub-agent's number (the main agent is 0).
    pub next_agent: AtomicU32,
}

/// How an agent ended.
#[derive(Debug)]
pub struct Finished {
    /// Its time on the critical path.
    pub spent: Spent,
    /// What it and its sub-agents did.
    pub counts: Counts,
    /// When it ended.
    pub end: Instant,
    /// Its last answer (what it hands back), or why it stopped.
    pub result: Result<Entry, Stop>,
}

/// One agent in progress.
pub struct Agent<'a, B> {
    io: &'a B,
    setup: &'a Setup<'a>,
    id: u32,
    depth: u32,
    rng: SmallRng,
    history: History,
    turn: u32,
    /// Its first call's due time (the main agent's: the session's arrival).
    due: Option<Instant>,
    spent: Spent,
    counts: Counts,
}

impl<'a, B: Backend> Agent<'a, B> {
    /// The main agent (depth 0) of a session with `task`, due at `due`.
    #[must_use]
    pub fn main(io: &'a B, setup: &'a Setup<'a>, rng: SmallRng, task: Entry, due: Instant) -> Self {
        let history = History::new(setup.system.clone(), task);
        Self {
            io,
            setup,
            id: 0,
            depth: 0,
            rng,
            history,
            turn: 0,
            due: Some(due),
            spent: Spent::default(),
            counts: Counts::default(),
        }
    }

    /// Runs `steps` to their end, or until one fails or is cut.
    #[must_use]
    pub fn run(mut self, steps: &'a [Step]) -> BoxFuture<'a, Finished> {
        Box::pin(async move {
            let mut result = Ok(());
            for s in steps {
                result = self.step(s).await;
                if result.is_err() {
                    break;
                }
            }
            Finished {
                spent: self.spent,
                counts: self.counts,
                end: Instant::now(),
                result: result.map(|()| self.history.last_answer().clone()),
            }
        })
    }

    fn step<'s>(&'s mut self, step: &'a Step) -> BoxFuture<'s, Result<(), Stop>> {
        Box::pin(async move {
            match step {
                Step::Llm(l) => self.llm(l.max_tokens.or(self.setup.max_tokens)).await,
                Step::Tool(t) => self.tool(t).await,
                Step::Think(w) => {
                    let d = w.draw(&mut self.rng);
                    let start = Instant::now();
                    if !self.io.wait(d).await {
                        return Err(Stop::Cut);
                    }
                    self.spent.think += start.elapsed();
                    Ok(())
                }
                Step::Agents(a) => self.agents(a).await,
                Step::Repeat(r) => {
                    for _ in 0..r.times {
                        for s in &r.steps {
                            self.step(s).await?;
                        }
                    }
                    Ok(())
                }
            }
        })
    }

    /// An LLM call on the history (compacted first when over the limit); its answer joins it.
    async fn llm(&mut self, max_tokens: Option<u32>) -> Result<(), Stop> {
        self.history.ready();
        self.compact().await?;
        let context = self.history.tokens();
        let messages = self.history.messages();
        let reply = self.call(messages, max_tokens, context, false).await?;
        let text = reply.text.unwrap_or_default();
        let tokens = reply.output_tokens.unwrap_or_else(|| count(&text));
        self.history.push(Entry::answer(text, tokens));
        Ok(())
    }

    /// Sends one call and accounts for it; a failed call stops the agent.
    async fn call(
        &mut self,
        messages: Vec<Value>,
        max_tokens: Option<u32>,
        context: u32,
        compaction: bool,
    ) -> Result<Reply, Stop> {
        self.turn += 1;
        let call = Call {
            messages,
            max_tokens,
            meta: SessionCall {
                id: self.setup.session,
                agent: self.id,
                depth: self.depth,
                context_tokens: context,
                compaction,
            },
            turn: self.turn,
            due: self.due.take().unwrap_or_else(Instant::now),
            seed: self.rng.next_u64(),
        };
        let reply = self.io.llm(call).await.ok_or(Stop::Cut)?;
        self.spent.model += reply.sent.elapsed();
        let c = &mut self.counts;
        c.calls += 1;
        c.input_tokens += u64::from(reply.input_tokens.unwrap_or(0));
        c.output_tokens += u64::from(reply.output_tokens.unwrap_or(0));
        c.max_context = c.max_context.max(context);
        c.check_failed |= !reply.passed;
        if !reply.ok {
            return Err(Stop::Failed(format!(
                "LLM call {} (agent {}, depth {}) failed: its record says why",
                reply.id, self.id, self.depth
            )));
        }
        Ok(reply)
    }

    /// Brings the history under the session's context limit, when it is over.
    async fn compact(&mut self) -> Result<(), Stop> {
        let Some(limit) = self.setup.spec.context_limit else {
            return Ok(());
        };
        if self.history.tokens() <= limit {
            return Ok(());
        }
        match self.setup.spec.compaction {
            Compaction::Drop => {
                if !self.history.drop_oldest(limit).is_empty() {
                    self.counts.compactions += 1;
                }
            }
            Compaction::Summary(n) => {
                let dropped = self.history.drop_oldest(limit.saturating_sub(n));
                if dropped.is_empty() {
                    return Ok(());
                }
                self.counts.compactions += 1;
                let (messages, context) = self.history.summary_request(&dropped, n);
                let reply = self.call(messages, Some(n), context, true).await?;
                let text = reply.text.unwrap_or_default();
                let tokens = reply.output_tokens.unwrap_or_else(|| count(&text));
                self.history.put_summary(Entry::user(text, tokens));
            }
        }
        Ok(())
    }

    /// A tool: a drawn wait or its endpoint; its result joins the history.
    async fn tool(&mut self, t: &ToolStep) -> Result<(), Stop> {
        let start = Instant::now();
        let answer = match (&t.wait, &t.url) {
            (Some(w), _) => {
                let d = w.draw(&mut self.rng);
                if !self.io.wait(d).await {
                    return Err(Stop::Cut);
                }
                None
            }
            (None, Some(url)) => {
                let query: Vec<&str> = self
                    .history
                    .last_answer()
                    .text
                    .split_whitespace()
                    .take(QUERY_WORDS)
                    .collect();
                let body = json!({"query": query.join(" ")}).to_string();
                let name = t.name.as_deref().unwrap_or("tool");
                let text = self.io.fetch(url, body).await.map_err(|e| match e {
                    Stop::Failed(why) => Stop::Failed(format!("tool `{name}` ({url}): {why}")),
                    Stop::Cut => Stop::Cut,
                })?;
                Some(text)
            }
            // Validation gives every tool one of the two.
            (None, None) => None,
        };
        self.spent.tools += start.elapsed();
        self.counts.tool_calls += 1;
        let entry = match (t.result_tokens, answer) {
            (Some(n), _) => {
                let n = n.draw(&mut self.rng);
                Entry::user(filler(n, self.rng.next_u64()), n)
            }
            (None, Some(text)) => {
                let n = count(&text);
                Entry::user(text, n)
            }
            (None, None) => return Ok(()),
        };
        self.history.push(entry);
        Ok(())
    }

    /// Sub-agents started together, each on its own task and context; once all have ended,
    /// their results join the history. The parts of the one that ended last are on the
    /// critical path.
    async fn agents(&mut self, a: &'a AgentsStep) -> Result<(), Stop> {
        let tokens = a.task_tokens.unwrap_or(self.setup.spec.task_tokens);
        let children: Vec<Agent<'a, B>> = (0..a.count)
            .map(|_| {
                let task = Entry::user(filler(tokens, self.rng.next_u64()), tokens);
                Agent {
                    io: self.io,
                    setup: self.setup,
                    id: self.setup.next_agent.fetch_add(1, Ordering::Relaxed),
                    depth: self.depth + 1,
                    rng: SmallRng::seed_from_u64(self.rng.next_u64()),
                    history: History::new(self.setup.system.clone(), task),
                    turn: 0,
                    due: None,
                    spent: Spent::default(),
                    counts: Counts::default(),
                }
            })
            .collect();
        self.counts.subagents += a.count;
        let ended = join_all(children.into_iter().map(|c| c.run(&a.steps))).await;
        if let Some(last) = ended.iter().max_by_key(|f| f.end) {
            self.spent += last.spent;
        }
        let mut results = Vec::with_capacity(ended.len());
        let mut stop = None;
        for f in ended {
            self.counts += f.counts;
            match f.result {
                Ok(answer) => results.push(answer),
                // A failure says more than a cut.
                Err(Stop::Failed(why)) if !matches!(stop, Some(Stop::Failed(_))) => {
                    stop = Some(Stop::Failed(why));
                }
                Err(other) => {
                    stop.get_or_insert(other);
                }
            }
        }
        if let Some(stop) = stop {
            return Err(stop);
        }
        for answer in results {
            let entry = match a.result_tokens {
                Some(n) => {
                    let n = n.draw(&mut self.rng);
                    Entry::user(filler(n, self.rng.next_u64()), n)
                }
                None => Entry::user(answer.text, answer.tokens),
            };
            self.history.push(entry);
        }
        Ok(())
    }
}

//! Agentic sessions (`request.session`) on the engine: each open-loop arrival starts one
//! session, each closed-loop user runs one after the other. A session's agents ([`agent`])
//! send their LLM calls through the engine's request path (the phase's caps, retries, timeout
//! and record, each call a record with its session, agent, depth and context length), wait
//! on tools (a drawn time, or a real endpoint through the pool) and think; when the session
//! ends, its own record goes to the tally.
//!
//! Like a conversation's turns, no call of a session starts after its phase's end, and a wait
//! that would end after it cuts the session there. Each call counts as scheduled as it is
//! sent (a session's arrival itself is not a request).

mod agent;
mod history;

use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicU32, AtomicU64, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use hyper::{Method, Uri};
use rand::{RngCore as _, SeedableRng as _, rngs::SmallRng};
use serde_json::{Map, Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use self::{
    agent::{Agent, Backend, Call, Reply, Setup, Stop},
    history::{Entry, System, count, filler},
};
use super::{
    Shared, Start,
    caps::{PhaseCaps, Taken},
    one,
    request::{PhaseCtx, Prepared},
    tally::Msg,
};
use crate::loadgen::{
    client::{Target, TargetError, Via, rag, us_since},
    scenario::{
        RequestSpec,
        dataset::Dataset,
        session::{SessionSpec, tool_urls},
        template::{Ctx, JsonTemplate, Template},
    },
};
use crate::measure::{
    record::{Endpoint, RequestRecord},
    session::{Parts, SessionOutcome, SessionRecord},
    trace_context::{TraceContext, TraceId},
};

/// Seed of the shared system prompt's words: the same text in every session.
const SYSTEM_SEED: u64 = 0x5e55_1011;

/// A session phase's description, compiled: the system prompt, the tool endpoints and what
/// each call's body holds.
#[derive(Debug)]
pub struct SessionPlan {
    spec: SessionSpec,
    system: System,
    /// Tool URL -> its service and URI.
    tools: BTreeMap<String, (Target, Uri)>,
    prompt: Option<Template>,
    dataset: Option<Arc<Dataset>>,
    model: String,
    max_tokens: Option<u32>,
    temperature: Option<JsonTemplate>,
    ignore_eos: Option<bool>,
    stream: bool,
    body: Option<JsonTemplate>,
}

impl SessionPlan {
    /// The plan of a phase whose request is `spec` (`None` without `session:`), its tools'
    /// services resolved against `target`.
    pub fn new(
        spec: &RequestSpec,
        dataset: Option<Arc<Dataset>>,
        target: &Target,
    ) -> Result<Option<Self>, TargetError> {
        let Some(s) = &spec.session else {
            return Ok(None);
        };
        let tools = tool_urls(&s.steps)
            .into_iter()
            .map(|url| {
                let t = target.at(&url)?;
                let uri = t.uri(&Target::url_path(&url).unwrap_or_else(|| "/".into()))?;
                Ok((url, (t, uri)))
            })
            .collect::<Result<_, TargetError>>()?;
        let system = (s.system_prompt_tokens > 0).then(|| {
            let text = filler(s.system_prompt_tokens, SYSTEM_SEED);
            (Arc::from(text.as_str()), s.system_prompt_tokens)
        });
        Ok(Some(Self {
            spec: s.clone(),
            system,
            tools,
            prompt: spec.prompt.clone(),
            dataset,
            model: spec.model.clone().unwrap_or_else(|| "default".into()),
            max_tokens: spec.max_tokens,
            temperature: spec.temperature.clone(),
            ignore_eos: spec.ignore_eos,
            stream: spec.stream.unwrap_or(true),
            body: spec.body.clone(),
        }))
    }

    /// Every tool service, as its host with its URL (for the loopback guardrail).
    #[must_use]
    pub fn hosts(&self) -> Vec<(String, String)> {
        self.tools
            .iter()
            .map(|(url, (t, _))| (t.host().to_owned(), url.clone()))
            .collect()
    }

    /// A session's task: the request's prompt, the dataset row's, or made-up text.
    fn task(&self, rng: &mut SmallRng, seq: u64) -> Entry {
        let row = self.dataset.as_ref().map(|d| d.pick(rng).clone());
        let text = match (&self.prompt, &row) {
            (Some(t), _) => t.render(&mut Ctx {
                rng,
                row: row.as_ref(),
                seq,
            }),
            (None, Some(r)) => r.prompt.clone(),
            (None, None) => {
                let n = self.spec.task_tokens;
                return Entry::user(filler(n, rng.next_u64()), n);
            }
        };
        let n = count(&text);
        Entry::user(text, n)
    }

    /// A call's body, and the `max_tokens` it asks for.
    fn body(
        &self,
        messages: Vec<Value>,
        max_tokens: Option<u32>,
        seed: u64,
        seq: u64,
    ) -> (Bytes, Option<u32>) {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut ctx = Ctx {
            rng: &mut rng,
            row: None,
            seq,
        };
        let mut body = Map::new();
        body.insert("model".into(), json!(self.model));
        body.insert("messages".into(), Value::Array(messages));
        if let Some(n) = max_tokens {
            body.insert("max_tokens".into(), json!(n));
        }
        if let Some(t) = &self.temperature {
            body.insert("temperature".into(), t.render(&mut ctx));
        }
        if let Some(ignore) = self.ignore_eos {
            body.insert("ignore_eos".into(), json!(ignore));
        }
        body.insert("stream".into(), json!(self.stream));
        if self.stream {
            body.insert("stream_options".into(), json!({"include_usage": true}));
        }
        if let Some(Value::Object(extra)) = self.body.as_ref().map(|t| t.render(&mut ctx)) {
            body.extend(extra);
        }
        let asked = body
            .get("max_tokens")
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok());
        (Bytes::from(Value::Object(body).to_string()), asked)
    }
}

/// What a session's agents talk to: the engine.
struct Wire<'a> {
    shared: &'a Arc<Shared>,
    ctx: &'a Arc<PhaseCtx>,
    caps: &'a Arc<PhaseCaps>,
    cancel: &'a CancellationToken,
    plan: &'a SessionPlan,
    /// A closed-loop user's start: its calls during the ramp are marked.
    ramp: Option<Start>,
    /// Calls sent or dropped by a cap (scheduled).
    sent: AtomicU64,
    /// The session's trace: each call is a span of it (`None`: no trace headers).
    trace: Option<TraceId>,
}

/// `at` in µs since the run's start.
fn at_us(at: Instant, t0: std::time::Instant) -> u64 {
    at.into_std().saturating_duration_since(t0).as_micros() as u64
}

impl Backend for Wire<'_> {
    async fn llm(&self, call: Call) -> Option<Reply> {
        let (shared, ctx) = (self.shared, self.ctx);
        if Instant::now() >= self.caps.end() {
            return None;
        }
        let seq = shared.seq.fetch_add(1, Ordering::Relaxed);
        let (body, max_tokens) = self
            .plan
            .body(call.messages, call.max_tokens, call.seed, seq);
        let p = Prepared {
            body,
            max_tokens,
            stream: self.plan.stream,
            turn: Some(call.turn),
            keep_text: true,
            ..Prepared::empty()
        };
        let permits = match self.caps.take(p.max_tokens, self.cancel).await {
            Taken::Send(permits) => permits,
            Taken::Dropped => {
                self.sent.fetch_add(1, Ordering::Relaxed);
                let _ = shared.tx.send(Msg::Dropped(ctx.index, 1)).await;
                return None;
            }
            Taken::Ended | Taken::Cancelled => return None,
        };
        self.sent.fetch_add(1, Ordering::Relaxed);
        let mut rec = RequestRecord::new(seq, ctx.index, ctx.endpoint, at_us(call.due, shared.t0));
        rec.ramp_up = self.ramp.is_some_and(|s| s.in_ramp());
        rec.session = Some(call.meta);
        rec.trace = self.trace.map(TraceContext::new_span);
        let sent = Instant::now();
        let answered = one(
            shared.clone(),
            ctx.clone(),
            p,
            rec,
            permits,
            self.caps.end(),
            None,
        )
        .await?;
        Some(Reply {
            id: seq,
            ok: answered.ok,
            passed: answered.passed,
            text: answered.text,
            input_tokens: answered.input_tokens,
            output_tokens: answered.output_tokens,
            sent,
        })
    }

    async fn fetch(&self, url: &str, body: String) -> Result<String, Stop> {
        let Some((t, uri)) = self.plan.tools.get(url) else {
            return Err(Stop::Failed(format!(
                "internal error: tool {url} was not compiled"
            )));
        };
        let shared = self.shared;
        let req = t.request_to(
            &Method::POST,
            uri.clone(),
            Bytes::from(body),
            self.ctx.headers(),
        );
        let mut x = RequestRecord::new(0, self.ctx.index, Endpoint::Http, us_since(shared.t0));
        x.trace = self.trace.map(TraceContext::new_span);
        let answered = {
            let mut via = Via::Pool(&shared.client);
            let fut = rag::tool(&mut via, req, &mut x, shared.t0);
            tokio::select! {
                r = tokio::time::timeout(shared.timeout, fut) => Some(r),
                () = self.cancel.cancelled() => None,
                () = shared.hard_stop.cancelled() => None,
            }
        };
        match answered {
            Some(Ok(Some(text))) => Ok(text),
            Some(Ok(None)) => Err(Stop::Failed(
                x.error_message.unwrap_or_else(|| "no answer".into()),
            )),
            Some(Err(_)) => Err(Stop::Failed(format!(
                "no answer within {}",
                humantime::format_duration(shared.timeout)
            ))),
            None => Err(Stop::Cut),
        }
    }

    async fn wait(&self, d: Duration) -> bool {
        let wake = Instant::now() + d;
        if wake >= self.caps.end() {
            return false;
        }
        tokio::select! {
            () = tokio::time::sleep_until(wake) => true,
            () = self.cancel.cancelled() => false,
        }
    }
}

/// Open loop: the session of an arrival due at `due`.
pub(super) async fn arrival(
    shared: Arc<Shared>,
    ctx: Arc<PhaseCtx>,
    caps: Arc<PhaseCaps>,
    mut rng: SmallRng,
    due: Instant,
    cancel: CancellationToken,
) {
    let Some(plan) = ctx.session.clone() else {
        return;
    };
    let wire = Wire {
        shared: &shared,
        ctx: &ctx,
        caps: &caps,
        cancel: &cancel,
        plan: &plan,
        ramp: None,
        sent: AtomicU64::new(0),
        trace: shared.new_trace(),
    };
    session(&wire, &mut rng, due).await;
}

/// Closed loop: a user running one session after the other until the phase ends.
pub(super) async fn user(
    shared: Arc<Shared>,
    ctx: Arc<PhaseCtx>,
    caps: Arc<PhaseCaps>,
    mut rng: SmallRng,
    start: Start,
    cancel: CancellationToken,
) {
    let Some(plan) = ctx.session.clone() else {
        return;
    };
    if start.at > Instant::now() {
        tokio::select! { () = tokio::time::sleep_until(start.at) => {}, () = cancel.cancelled() => return }
    }
    while Instant::now() < caps.end() && !cancel.is_cancelled() {
        let wire = Wire {
            shared: &shared,
            ctx: &ctx,
            caps: &caps,
            cancel: &cancel,
            plan: &plan,
            ramp: Some(start),
            sent: AtomicU64::new(0),
            trace: shared.new_trace(),
        };
        session(&wire, &mut rng, Instant::now()).await;
    }
}

/// Runs one session due at `due` and hands its record to the tally.
async fn session(wire: &Wire<'_>, rng: &mut SmallRng, due: Instant) {
    let (shared, ctx, plan) = (wire.shared, wire.ctx, wire.plan);
    let id = shared.seq.fetch_add(1, Ordering::Relaxed);
    let task = plan.task(rng, id);
    let setup = Setup {
        spec: &plan.spec,
        system: plan.system.clone(),
        max_tokens: plan.max_tokens,
        session: id,
        next_agent: AtomicU32::new(1),
    };
    let main = Agent::main(
        wire,
        &setup,
        SmallRng::seed_from_u64(rng.next_u64()),
        task,
        due,
    );
    let done = main.run(&plan.spec.steps).await;
    let intended_us = at_us(due, shared.t0);
    let end_us = at_us(done.end, shared.t0);
    let us = |d: Duration| d.as_micros() as u64;
    let (model_us, tools_us, think_us) = (
        us(done.spent.model),
        us(done.spent.tools),
        us(done.spent.think),
    );
    let parts = Parts {
        model_us,
        tools_us,
        think_us,
        client_us: end_us
            .saturating_sub(intended_us)
            .saturating_sub(model_us + tools_us + think_us),
    };
    let (outcome, error) = match done.result {
        Ok(_) => (SessionOutcome::Completed, None),
        Err(Stop::Failed(why)) => (SessionOutcome::Failed, Some(why)),
        Err(Stop::Cut) => (SessionOutcome::Cut, None),
    };
    let c = done.counts;
    let record = SessionRecord {
        id,
        phase: ctx.index,
        intended_us,
        end_us,
        outcome,
        error,
        calls: c.calls,
        tool_calls: c.tool_calls,
        subagents: c.subagents,
        compactions: c.compactions,
        input_tokens: c.input_tokens,
        output_tokens: c.output_tokens,
        max_context_tokens: c.max_context,
        parts,
    };
    let _ = shared.tx.send(Msg::Session(Box::new(record))).await;
    // A session is a task (sTPS) unless it was cut.
    if outcome != SessionOutcome::Cut {
        let ok = outcome == SessionOutcome::Completed && !c.check_failed;
        let _ = shared.tx.send(Msg::Task(ctx.index, ok, None)).await;
    }
    let sent = wire.sent.load(Ordering::Relaxed);
    let _ = shared.tx.send(Msg::Scheduled(ctx.index, sent)).await;
}

#[cfg(test)]
mod tests;

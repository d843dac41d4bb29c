//! Agentic sessions (`request.session`) on the engine: each open-loop arrival starts one
//! session, each closed-loop user runs one after the other. A session's agents (`agent`)
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
pub mod plan;

use std::{
    sync::{
        Arc,
        atomic::{AtomicU32, AtomicU64, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use hyper::Method;
use rand::{RngCore as _, SeedableRng as _, rngs::SmallRng};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use self::{
    agent::{Agent, Backend, Call, Reply, Setup, Stop},
    plan::SessionPlan,
};
use super::{
    Shared, Start,
    caps::{PhaseCaps, Taken},
    one,
    request::{PhaseCtx, Prepared},
    tally::Msg,
};
use crate::loadgen::client::{rag, us_since, via::Via};
use crate::measure::{
    record::{Endpoint, RequestRecord},
    session::{Parts, SessionOutcome, SessionRecord},
    trace_context::{TraceContext, TraceId},
};

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

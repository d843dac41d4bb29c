//! One request's task: its attempts under the phase's retry policy, each attempt's record
//! delivered to the tally, and the phase's events.

use std::sync::{Arc, atomic::Ordering};

use hyper::Method;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::loadgen::{
    client::{OwnConn, us_since, via::Via},
    engine::caps::Permits,
    engine::request::{Executed, PhaseCtx, Prepared},
    engine::tally::Msg,
    engine::vector::truth::Pending,
};

use crate::measure::{
    record::{Endpoint, ErrorClass, RequestRecord},
    report::EventRecord,
    trace_context::TraceContext,
};

use super::{END_SLACK, Shared};

/// How a request ended, for the next turn of its conversation.
pub(super) struct Answered {
    /// No error: the conversation may go on.
    pub(super) ok: bool,
    /// And its answer passed the phase's check (if any).
    pub(super) passed: bool,
    /// The answer's text, when it was kept.
    pub(super) text: Option<String>,
    /// Mean token entropy of the answer (when logprobs were asked).
    pub(super) entropy: Option<f64>,
    /// Prompt and output tokens (an agentic session's context counts them).
    pub(super) input_tokens: Option<u32>,
    pub(super) output_tokens: Option<u32>,
}

/// One request, and its retries under the phase's retry policy: each attempt reported as it
/// ends. A request outside a conversation with a policy is a task decided by its last attempt.
///
/// A request whose task starts only after the phase's `end` and [`END_SLACK`] (its dispatcher,
/// or the runtime, fell behind) is not sent: it counts as dropped, and `None` is returned.
pub(super) async fn one(
    shared: Arc<Shared>,
    ctx: Arc<PhaseCtx>,
    p: Prepared,
    mut rec: RequestRecord,
    _permits: Permits,
    end: Instant,
    mut own: Option<&mut OwnConn>,
) -> Option<Answered> {
    if Instant::now() >= end + END_SLACK {
        let _ = shared.tx.send(Msg::Dropped(ctx.index, 1)).await;
        return None;
    }
    let Some(policy) = ctx.retry() else {
        let (rec, answered, truth) = attempt(&shared, &ctx, p, rec, own).await;
        deliver(&shared, rec, truth).await;
        return Some(answered);
    };
    let mut n = 1;
    rec.attempt = Some(n);
    loop {
        let (done, answered, truth) =
            attempt(&shared, &ctx, p.clone(), rec, own.as_deref_mut()).await;
        let again = policy.retries(&done, n);
        let single = done.turn.is_none();
        // A retry stays in its request's trace, as a span of its own.
        let trace = done.trace.map(|t| t.trace_id());
        deliver(&shared, done, truth).await;
        let wait = policy.wait_after(n);
        if !again || shared.hard_stop.is_cancelled() {
            if single {
                let ok = answered.ok && answered.passed;
                let _ = shared.tx.send(Msg::Task(ctx.index, ok, None)).await;
            }
            return Some(answered);
        }
        tokio::select! { () = tokio::time::sleep(wait) => {}, () = shared.hard_stop.cancelled() => {} }
        n += 1;
        let seq = shared.seq.fetch_add(1, Ordering::Relaxed);
        // A retry is due when it is sent: its own latency, apart from first attempts'.
        rec = RequestRecord::new(seq, ctx.index, ctx.endpoint, us_since(shared.t0));
        rec.attempt = Some(n);
        rec.trace = trace.map(TraceContext::new_span);
    }
}

/// Hands a finished record to the collector. A sampled vector query whose recall is still to
/// compute goes to the ground-truth thread, and its record follows from a task of its own
/// once the recall is known: the request's task (and a closed-loop user) moves on at once.
pub(super) async fn deliver(shared: &Arc<Shared>, mut rec: RequestRecord, truth: Option<Pending>) {
    let Some(job) = truth else {
        let _ = shared.tx.send(Msg::Record(Box::new(rec))).await;
        return;
    };
    let Some(rx) = shared.truth.as_ref().and_then(|t| t.submit(job)) else {
        let _ = shared.tx.send(Msg::RecallDropped(rec.phase)).await;
        let _ = shared.tx.send(Msg::Record(Box::new(rec))).await;
        return;
    };
    let tx = shared.tx.clone();
    tokio::spawn(async move {
        rec.recall = rx.await.ok();
        let _ = tx.send(Msg::Record(Box::new(rec))).await;
    });
}

/// One attempt: executed under the timeout, aborted by the hard stop.
async fn attempt(
    shared: &Arc<Shared>,
    ctx: &PhaseCtx,
    p: Prepared,
    mut rec: RequestRecord,
    own: Option<&mut OwnConn>,
) -> (RequestRecord, Answered, Option<Pending>) {
    let t0 = shared.t0;
    rec.actual_us = us_since(t0);
    // Outside a conversation (which set its own), a request is a span of the run's trace.
    if rec.trace.is_none() {
        rec.trace = shared.trace.map(TraceContext::new_span);
    }
    if ctx.pipeline.is_none() && matches!(ctx.endpoint, Endpoint::Chat | Endpoint::Completions) {
        rec.prompt_key = Some(prompt_key(&p.body));
    }
    let mut base = rec.clone();
    base.chaos = p.chaos;
    let fut = async {
        // A pipeline's steps go to several services: always through the pool.
        let mut via = match own {
            Some(conn) if ctx.pipeline.is_none() => Via::Own(conn),
            _ => Via::Pool(&shared.client),
        };
        let done = ctx.execute(&mut via, &shared.target, p, &mut rec, t0).await;
        (rec, done)
    };
    let (rec, done) = tokio::select! {
        r = tokio::time::timeout(shared.timeout, fut) => r.unwrap_or_else(|_| {
            base.end_us = us_since(t0);
            base.fail(ErrorClass::Timeout, format!("no complete answer within {}", humantime::format_duration(shared.timeout)));
            (base, Executed::default())
        }),
        () = shared.hard_stop.cancelled() => {
            base.end_us = us_since(t0);
            base.fail(ErrorClass::Aborted, "stopped before the answer completed (run interrupted)");
            (base, Executed::default())
        }
    };
    let answered = Answered {
        ok: rec.error.is_none(),
        passed: rec.check != Some(false),
        text: done.text,
        entropy: rec.entropy,
        input_tokens: rec.input_tokens,
        output_tokens: rec.output_tokens,
    };
    (rec, answered, done.truth)
}

/// An LLM request's body hashed (`RequestRecord::prompt_key`).
fn prompt_key(body: &[u8]) -> u64 {
    use std::hash::{Hash as _, Hasher as _};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    body.hash(&mut h);
    h.finish()
}

pub(super) async fn event(
    shared: Arc<Shared>,
    phase: u32,
    ev: crate::loadgen::scenario::EventSpec,
    uri: hyper::Uri,
    at: Instant,
    cancel: CancellationToken,
) {
    tokio::select! { () = tokio::time::sleep_until(at) => {}, () = cancel.cancelled() => return }
    let method =
        Method::from_bytes(ev.method.to_ascii_uppercase().as_bytes()).unwrap_or(Method::POST);
    let body = ev.body.unwrap_or_else(|| serde_json::json!({})).to_string();
    let req = shared.target.request_to(&method, uri, body.into(), &[]);
    let at_us = us_since(shared.t0);
    let outcome = match tokio::time::timeout(shared.timeout, shared.client.request(req)).await {
        Ok(Ok(resp)) => format!("HTTP {}", resp.status().as_u16()),
        Ok(Err(e)) => crate::loadgen::client::error_chain(&e),
        Err(_) => "timeout".into(),
    };
    let request = format!("{method} {}", ev.path);
    let _ = shared
        .tx
        .send(Msg::Event(EventRecord {
            phase,
            request,
            at_us,
            end_us: us_since(shared.t0),
            outcome,
        }))
        .await;
}

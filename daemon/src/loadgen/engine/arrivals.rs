//! How a phase's arrivals are sent: the open loop sleeping to each absolute deadline, and
//! the closed loop's users (with their conversations' turns), each arrival a request task.

use std::sync::{Arc, atomic::Ordering};

use rand::{RngCore as _, SeedableRng as _, rngs::SmallRng};
use tokio::time::Instant;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::loadgen::{
    client::{OwnConn, us_since},
    engine::caps::{PhaseCaps, Taken},
    engine::complexity::Shaper,
    engine::conversation::Conversation,
    engine::request::{PhaseCtx, Prepared},
    engine::tally::Msg,
    scenario::Phase,
    scenario::arrival::Schedule,
};

use crate::measure::{
    record::RequestRecord,
    trace_context::{TraceContext, TraceId},
};

use super::{
    END_SLACK, Fault, Shared, complexity,
    send::{Answered, one},
    session,
};

/// Open loop: sleep to each absolute deadline, apply the caps, spawn the request.
#[allow(clippy::too_many_arguments, clippy::too_many_lines)] // one arrival's story, in order
pub(super) async fn open_loop(
    shared: &Arc<Shared>,
    ctx: &Arc<PhaseCtx>,
    phase: &Phase,
    caps: &Arc<PhaseCaps>,
    mut offsets: Schedule<SmallRng>,
    start: Instant,
    rng: &mut SmallRng,
    tracker: &TaskTracker,
    cancel: &CancellationToken,
) -> u64 {
    let mut scheduled = 0;
    // Nothing is sent after the phase's end, whether a cap held it back or the dispatcher
    // itself fell behind: the next phase starts on time, and the arrivals not sent by then
    // count as scheduled and dropped.
    let end = caps.end();
    // At the phase's end: the arrival in hand (already counted as scheduled) and those not
    // taken yet are dropped.
    let overrun = async |left_after: usize, scheduled: &mut u64| {
        let left = left_after as u64 + 1;
        *scheduled += left - 1;
        let _ = shared.tx.send(Msg::Dropped(ctx.index, left)).await;
    };
    let mut shaper = phase
        .load
        .complexity_shaping()
        .then(|| Shaper::new(phase.duration));
    while let Some(off) = offsets.next() {
        // Complexity shaping renders the request before its gap, which its score stretches.
        let mut early = None;
        let off = match &mut shaper {
            Some(shaper) => {
                let seq = shared.seq.fetch_add(1, Ordering::Relaxed);
                let Some((conv, prepared)) = first_request(ctx, rng, seq, Some(offsets.taken()))
                else {
                    continue;
                };
                let score = complexity::of_request(&prepared.body).score;
                let Some(off) = shaper.next(off, score) else {
                    break;
                };
                early = Some((seq, conv, prepared));
                off
            }
            None => off,
        };
        let deadline = start + off;
        tokio::select! { () = tokio::time::sleep_until(deadline) => {}, () = cancel.cancelled() => break }
        scheduled += 1;
        if Instant::now() >= end + END_SLACK {
            overrun(offsets.remaining(), &mut scheduled).await;
            break;
        }
        if ctx.session.is_some() {
            // A session counts its calls as scheduled as it sends them (`session.rs`).
            scheduled -= 1;
            let rng = SmallRng::seed_from_u64(rng.next_u64());
            let run = session::arrival(
                shared.clone(),
                ctx.clone(),
                caps.clone(),
                rng,
                deadline,
                cancel.clone(),
            );
            tracker.spawn(run);
            continue;
        }
        let (seq, conv, prepared) = if let Some(e) = early {
            e
        } else {
            let seq = shared.seq.fetch_add(1, Ordering::Relaxed);
            if let Some(Fault::DispatcherPanic { request }) = shared.fault {
                assert!(!(ctx.index == 0 && seq == request), "injected panic");
            }
            let Some((conv, prepared)) = first_request(ctx, rng, seq, Some(offsets.taken())) else {
                continue;
            };
            (seq, conv, prepared)
        };
        let permits = match caps.take(prepared.max_tokens, cancel).await {
            Taken::Send(p) => p,
            Taken::Dropped => {
                let _ = shared.tx.send(Msg::Dropped(ctx.index, 1)).await;
                continue;
            }
            Taken::Ended => {
                overrun(offsets.remaining(), &mut scheduled).await;
                break;
            }
            Taken::Cancelled => break,
        };
        let intended = deadline
            .into_std()
            .saturating_duration_since(shared.t0)
            .as_micros() as u64;
        let mut rec = RequestRecord::new(seq, ctx.index, ctx.endpoint, intended);
        // A conversation's turns share a trace of their own.
        let trace = conv.as_ref().and_then(|_| shared.new_trace());
        rec.trace = trace.map(TraceContext::new_span);
        let end = caps.end();
        let sent = one(
            shared.clone(),
            ctx.clone(),
            prepared,
            rec,
            permits,
            end,
            None,
        );
        let Some(conv) = conv else {
            tracker.spawn(async move {
                sent.await;
            });
            continue;
        };
        let turns = Turns {
            conv,
            caps: caps.clone(),
            rng: SmallRng::seed_from_u64(rng.next_u64()),
            ramp: None,
            trace,
        };
        let (shared, ctx, cancel) = (shared.clone(), ctx.clone(), cancel.clone());
        tracker.spawn(async move {
            if let Some(first) = sent.await {
                turns.follow(&shared, &ctx, first, &cancel, None).await;
            }
        });
    }
    scheduled
}

/// The request of an arrival (the phase's arrival number `arrival`, when open loop): the
/// first turn of a new conversation (`None` when it has no turn to send), or a single request.
pub(super) fn first_request(
    ctx: &PhaseCtx,
    rng: &mut SmallRng,
    seq: u64,
    arrival: Option<usize>,
) -> Option<(Option<Conversation>, Prepared)> {
    // A conversation starts here; its later turns follow its answers.
    let mut conv = ctx.start_conversation(rng, seq);
    let prepared = match conv.as_mut() {
        Some(c) => ctx.prepare_turn(rng, seq, c)?,
        None => ctx.prepare(rng, seq, arrival),
    };
    Some((conv, prepared))
}

/// The turns of a conversation after its first: each after the previous answer and the
/// think time, until the conversation ends, a turn fails, or the phase ends.
struct Turns {
    conv: Conversation,
    /// The phase's caps, which every turn takes as the first did.
    caps: Arc<PhaseCaps>,
    rng: SmallRng,
    /// A closed-loop user's start: its turns during the ramp are marked as its first was.
    ramp: Option<Start>,
    /// The conversation's trace id (`None`: no trace headers).
    trace: Option<TraceId>,
}

impl Turns {
    /// Sends the turns after `first`; each counts as scheduled. Returns the turns sent.
    async fn follow(
        mut self,
        shared: &Arc<Shared>,
        ctx: &Arc<PhaseCtx>,
        first: Answered,
        cancel: &CancellationToken,
        mut own: Option<&mut OwnConn>,
    ) -> u64 {
        let think = ctx.think_time().unwrap_or_default();
        let mut answered = first;
        let mut sent = 0;
        let mut passed = true;
        let mut entropies = Vec::new();
        let task = loop {
            passed &= answered.ok && answered.passed;
            entropies.extend(answered.entropy);
            if !answered.ok {
                break Some(false);
            }
            self.conv.answered(answered.text);
            if self.conv.remaining() == 0 {
                break Some(passed);
            }
            // Cut by the phase's end or a stop: not a task, neither succeeded nor failed.
            let wake = Instant::now() + think;
            if wake >= self.caps.end() {
                break None;
            }
            tokio::select! { () = tokio::time::sleep_until(wake) => {}, () = cancel.cancelled() => break None }
            let seq = shared.seq.fetch_add(1, Ordering::Relaxed);
            let Some(p) = ctx.prepare_turn(&mut self.rng, seq, &mut self.conv) else {
                break None;
            };
            let permits = match self.caps.take(p.max_tokens, cancel).await {
                Taken::Send(permits) => permits,
                // A turn the caps drop ends its conversation, cut (not a task).
                Taken::Dropped => {
                    sent += 1;
                    let _ = shared.tx.send(Msg::Dropped(ctx.index, 1)).await;
                    break None;
                }
                Taken::Ended | Taken::Cancelled => break None,
            };
            // A follow-up turn is closed loop: it is due when it is sent.
            let mut rec = RequestRecord::new(seq, ctx.index, ctx.endpoint, us_since(shared.t0));
            rec.ramp_up = self.ramp.is_some_and(|s| s.in_ramp());
            rec.trace = self.trace.map(TraceContext::new_span);
            sent += 1;
            let end = self.caps.end();
            let Some(next) = one(
                shared.clone(),
                ctx.clone(),
                p,
                rec,
                permits,
                end,
                own.as_deref_mut(),
            )
            .await
            else {
                break None;
            };
            answered = next;
        };
        if let Some(ok) = task {
            let ice = crate::loadgen::engine::conversation::ice(&entropies);
            let _ = shared.tx.send(Msg::Task(ctx.index, ok, ice)).await;
        }
        if own.is_none() {
            let _ = shared.tx.send(Msg::Scheduled(ctx.index, sent)).await;
        }
        sent
    }
}

/// When a closed-loop user starts, and until when its requests count as the ramp's.
#[derive(Debug, Clone, Copy)]
pub(super) struct Start {
    /// Its first request (and connection) is not before this.
    pub(super) at: Instant,
    /// Requests started before this are marked `ramp_up` (kept apart from the percentiles).
    pub(super) ramp_end: Option<Instant>,
}

impl Start {
    /// Whether a request starting now is one of the ramp's.
    pub(super) fn in_ramp(&self) -> bool {
        self.ramp_end.is_some_and(|e| Instant::now() < e)
    }
}

/// Closed loop: one virtual user sending its next request when the previous one ends.
pub(super) async fn user(
    shared: Arc<Shared>,
    ctx: Arc<PhaseCtx>,
    caps: Arc<PhaseCaps>,
    mut rng: SmallRng,
    start: Start,
    cancel: CancellationToken,
) {
    if ctx.session.is_some() {
        return session::user(shared, ctx, caps, rng, start, cancel).await;
    }
    if start.at > Instant::now() {
        tokio::select! { () = tokio::time::sleep_until(start.at) => {}, () = cancel.cancelled() => return }
    }
    // Each user owns one connection, as a wrk/oha connection does.
    let mut own = OwnConn::new(&shared.target, shared.timeout, shared.reach);
    let mut n = 0;
    while Instant::now() < caps.end() && !cancel.is_cancelled() {
        let seq = shared.seq.fetch_add(1, Ordering::Relaxed);
        // A user runs one conversation at a time, turn after turn.
        let Some((conv, prepared)) = first_request(&ctx, &mut rng, seq, None) else {
            break;
        };
        // A closed loop waits for its caps (validation refuses `when_capped: drop` for one);
        // waiting for room never runs past the phase's end.
        let Taken::Send(permits) = caps.take(prepared.max_tokens, &cancel).await else {
            break;
        };
        let mut rec = RequestRecord::new(seq, ctx.index, ctx.endpoint, us_since(shared.t0));
        rec.ramp_up = start.in_ramp();
        let trace = conv.as_ref().and_then(|_| shared.new_trace());
        rec.trace = trace.map(TraceContext::new_span);
        let first = one(
            shared.clone(),
            ctx.clone(),
            prepared,
            rec,
            permits,
            caps.end(),
            Some(&mut own),
        )
        .await;
        n += 1;
        let Some(first) = first else {
            break;
        };
        if let Some(conv) = conv {
            let turns = Turns {
                conv,
                caps: caps.clone(),
                rng: SmallRng::seed_from_u64(rng.next_u64()),
                ramp: Some(start),
                trace,
            };
            n += turns
                .follow(&shared, &ctx, first, &cancel, Some(&mut own))
                .await;
        }
    }
    let _ = shared.tx.send(Msg::Scheduled(ctx.index, n)).await;
}

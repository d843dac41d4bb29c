//! `chaos.stampede`: every `every` of a phase, one request rendered once and sent `size` times
//! at the same instant, on top of the phase's arrivals, once a POST to the `reset` path (when
//! given) was answered, so that the server's prefix cache has forgotten it. Each copy is a request of the
//! phase like any other (caps, timeout, retries, record), marked `chaos: stampede`.

use std::sync::{Arc, atomic::Ordering};

use rand::{SeedableRng as _, rngs::SmallRng};
use tokio::time::Instant;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use super::{PhaseCaps, PhaseCtx, Shared, Taken, event, first_request, one};
use crate::loadgen::scenario::{EventSpec, StampedeSpec};
use crate::measure::{
    record::{Chaos, RequestRecord},
    report::EventRecord,
};

/// Runs the phase's bursts until its end (`start` + `duration`); the copies run on `tracker`.
#[allow(clippy::too_many_arguments)]
pub(super) async fn run(
    shared: Arc<Shared>,
    ctx: Arc<PhaseCtx>,
    caps: Arc<PhaseCaps>,
    spec: StampedeSpec,
    start: Instant,
    seed: u64,
    tracker: TaskTracker,
    cancel: CancellationToken,
) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let size = shared.shard.users(spec.size as usize);
    let end = caps.end();
    let mut at = start + spec.every;
    // The scenario's checks refuse a path that makes no URI; should one get through, the
    // failure is an event of the phase, and no burst goes out unreset.
    let reset = match spec.reset.as_ref().map(|p| (p, shared.target.uri(p))) {
        Some((path, Err(e))) => {
            let at_us = super::us_since(shared.t0);
            let _ = shared
                .tx
                .send(super::Msg::Event(EventRecord {
                    phase: ctx.index,
                    request: format!("POST {path}"),
                    at_us,
                    end_us: at_us,
                    outcome: format!("not sent: {e}"),
                }))
                .await;
            return;
        }
        Some((path, Ok(uri))) => Some((path, uri)),
        None => None,
    };
    while at < end && size > 0 {
        if let Some((path, uri)) = &reset {
            // Sent and answered before the burst: the copies find an empty cache.
            let spec = EventSpec {
                at: spec.every,
                method: "POST".into(),
                path: (*path).clone(),
                body: None,
            };
            event(
                shared.clone(),
                ctx.index,
                spec,
                uri.clone(),
                at,
                cancel.clone(),
            )
            .await;
        } else {
            tokio::select! { () = tokio::time::sleep_until(at) => {}, () = cancel.cancelled() => return }
        }
        if cancel.is_cancelled() {
            return;
        }
        let seq = shared.seq.fetch_add(1, Ordering::Relaxed);
        let Some((_, mut prepared)) = first_request(&ctx, &mut rng, seq, None) else {
            return;
        };
        prepared.chaos = Some(Chaos::Stampede);
        // Released once the reset is answered: its copies' latency counts from there.
        let intended = Instant::now()
            .max(at)
            .into_std()
            .saturating_duration_since(shared.t0)
            .as_micros() as u64;
        for i in 0..size {
            let permits = match caps.take(prepared.max_tokens, &cancel).await {
                Taken::Send(p) => p,
                Taken::Dropped => {
                    let _ = shared.tx.send(super::Msg::Dropped(ctx.index, 1)).await;
                    continue;
                }
                Taken::Ended | Taken::Cancelled => return,
            };
            let id = if i == 0 {
                seq
            } else {
                shared.seq.fetch_add(1, Ordering::Relaxed)
            };
            let rec = RequestRecord::new(id, ctx.index, ctx.endpoint, intended);
            let sent = one(
                shared.clone(),
                ctx.clone(),
                prepared.clone(),
                rec,
                permits,
                end,
                None,
            );
            tracker.spawn(async move {
                sent.await;
            });
        }
        at += spec.every;
    }
}

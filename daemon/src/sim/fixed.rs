//! The `fixed` profile's generator: token i of every request is sent at exactly
//! `arrival + ttft + i * itl`, whatever the load. Deadlines are absolute (tokio `sleep_until`),
//! so timer lateness never accumulates across tokens: the ground truth against which a load
//! generator's own measurement error is computed.

use std::{sync::Arc, time::Duration};

use tokio::{sync::mpsc::UnboundedSender, time::Instant};

use super::{
    config::FixedTiming,
    engine::{Event, Shared},
    sampler::Sampler,
    scheduler::FinishReason,
};

/// One request to generate.
#[derive(Debug, Clone)]
pub struct FixedRequest {
    /// When the request arrived.
    pub arrival: Instant,
    /// Prompt tokens (for usage).
    pub prompt_tokens: usize,
    /// Tokens to send.
    pub tokens: usize,
    /// Why it ends after them.
    pub reason: FinishReason,
    /// Draws the text.
    pub sampler: Sampler,
}

/// Sends the request's events on `tx` at their deadlines; stops early when the client is gone.
pub async fn generate(
    t: FixedTiming,
    req: FixedRequest,
    tx: UnboundedSender<Event>,
    sh: Arc<Shared>,
) {
    let ttft = Duration::from_secs_f64(t.ttft_ms / 1e3);
    let itl = Duration::from_secs_f64(t.itl_ms / 1e3);
    sh.metrics().prompt_tokens += req.prompt_tokens as u64;
    let mut last: Option<Instant> = None;
    for i in 0..req.tokens {
        let deadline = req.arrival + ttft + itl * i as u32;
        tokio::time::sleep_until(deadline).await;
        if tx.send(Event::Token(req.sampler.token(i))).is_err() {
            sh.metrics().finished("abort");
            return;
        }
        let now = Instant::now();
        let mut m = sh.metrics();
        m.generation_tokens += 1;
        match last {
            None => m.ttft.observe((now - req.arrival).as_secs_f64()),
            Some(l) => m.itl.observe((now - l).as_secs_f64()),
        }
        last = Some(now);
    }
    let mut m = sh.metrics();
    m.e2e.observe(req.arrival.elapsed().as_secs_f64());
    m.queue.observe(0.0);
    m.finished(super::stream::reason_str(req.reason));
    drop(m);
    let _ = tx.send(Event::Finished {
        reason: req.reason,
        prompt_tokens: req.prompt_tokens,
        completion_tokens: req.tokens,
    });
}

//! The `fixed` profile's generator: token i of every request is sent at exactly
//! `arrival + ttft + i * itl`, whatever the load. Deadlines are absolute, so timer lateness
//! never accumulates across tokens: the ground truth against which a load generator's own
//! measurement error is computed.
//!
//! A [`Schedule`] is polled by the response body itself (no task and no channel per request):
//! at 1,000 streams of a token every 10 ms the sim's own per-token cost is what keeps it on
//! time.

use std::{
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use tokio::time::{Instant, Sleep};

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

/// A request's events at their deadlines. Dropped before the end (client gone), it counts
/// as an aborted request.
#[derive(Debug)]
pub struct Schedule {
    req: FixedRequest,
    ttft: Duration,
    itl: Duration,
    next: usize,
    last: Option<Instant>,
    sleep: Pin<Box<Sleep>>,
    sh: Arc<Shared>,
    done: bool,
}

impl Schedule {
    /// The schedule of `req` under timing `t`.
    #[must_use]
    pub fn new(t: &FixedTiming, req: FixedRequest, sh: Arc<Shared>) -> Self {
        let ttft = Duration::from_secs_f64(t.ttft_ms / 1e3);
        sh.metrics().prompt_tokens += req.prompt_tokens as u64;
        Self {
            sleep: Box::pin(tokio::time::sleep_until(req.arrival + ttft)),
            req,
            ttft,
            itl: Duration::from_secs_f64(t.itl_ms / 1e3),
            next: 0,
            last: None,
            sh,
            done: false,
        }
    }

    /// The next event once its deadline has passed; `None` after the last.
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        if self.done {
            return Poll::Ready(None);
        }
        if self.next < self.req.tokens {
            let deadline = self.req.arrival + self.ttft + self.itl * self.next as u32;
            if self.sleep.deadline() != deadline {
                self.sleep.as_mut().reset(deadline);
            }
            if self.sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let token = self.req.sampler.token(self.next);
            let now = Instant::now();
            let mut m = self.sh.metrics();
            m.generation_tokens += 1;
            let late = now.saturating_duration_since(deadline);
            match self.last {
                None => {
                    m.ttft.observe((now - self.req.arrival).as_secs_f64());
                    if let Some(l) = m.lateness.as_mut() {
                        l.first(late);
                    }
                }
                Some(last) => {
                    m.itl.observe((now - last).as_secs_f64());
                    if let Some(l) = m.lateness.as_mut() {
                        l.later(late, now - last);
                    }
                }
            }
            drop(m);
            self.last = Some(now);
            self.next += 1;
            return Poll::Ready(Some(Event::Token(token)));
        }
        let mut m = self.sh.metrics();
        m.e2e.observe(self.req.arrival.elapsed().as_secs_f64());
        m.queue.observe(0.0);
        m.finished(self.req.reason.as_str());
        drop(m);
        self.done = true;
        Poll::Ready(Some(Event::Finished {
            reason: self.req.reason,
            prompt_tokens: self.req.prompt_tokens,
            completion_tokens: self.req.tokens,
        }))
    }
}

impl Drop for Schedule {
    fn drop(&mut self) {
        if !self.done {
            self.sh.metrics().finished("abort");
        }
    }
}

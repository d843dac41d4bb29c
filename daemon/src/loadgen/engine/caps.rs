//! Caps on requests in flight (semaphores) and on requested tokens per second (a token
//! bucket); `when_capped` decides between waiting and dropping.

use std::{sync::Arc, time::Duration};

use tokio::{
    sync::{OwnedSemaphorePermit, Semaphore},
    time::Instant,
};
use tokio_util::sync::CancellationToken;

use crate::loadgen::scenario::CapPolicy;

/// The in-flight permits a request holds until it ends (run-wide, and the phase's).
pub type Permits = (OwnedSemaphorePermit, Option<OwnedSemaphorePermit>);

/// Outcome of [`acquire`].
pub enum Acquired {
    Yes(Permits),
    Full,
    Cancelled,
}

/// Takes the run-wide and the phase permit, waiting or not as `policy` says.
pub async fn acquire(
    global: &Arc<Semaphore>,
    phase: Option<&Arc<Semaphore>>,
    policy: CapPolicy,
    cancel: &CancellationToken,
) -> Acquired {
    let get = |s: &Arc<Semaphore>| {
        let s = s.clone();
        async move {
            match policy {
                CapPolicy::Drop => s.try_acquire_owned().ok(),
                CapPolicy::Wait => s.acquire_owned().await.ok(),
            }
        }
    };
    let both = async {
        let p = match phase {
            Some(s) => Some(get(s).await?),
            None => None,
        };
        Some((get(global).await?, p))
    };
    tokio::select! {
        r = both => r.map_or(Acquired::Full, Acquired::Yes),
        () = cancel.cancelled() => Acquired::Cancelled,
    }
}

/// Token bucket over requested output tokens (one second of burst).
pub struct TokenBucket {
    rate: f64,
    level: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket refilling at `rate` tokens per second.
    #[must_use]
    pub fn new(rate: f64) -> Self {
        TokenBucket {
            rate,
            level: rate,
            last: Instant::now(),
        }
    }

    /// `Some(wait)` when `n` tokens are granted after `wait`; `None` when dropped.
    pub fn reserve(&mut self, n: f64, policy: CapPolicy) -> Option<Duration> {
        let now = Instant::now();
        self.level =
            (self.level + now.duration_since(self.last).as_secs_f64() * self.rate).min(self.rate);
        self.last = now;
        if self.level >= n {
            self.level -= n;
            return Some(Duration::ZERO);
        }
        if policy == CapPolicy::Drop {
            return None;
        }
        // Reserve now (the level goes negative) so later requests queue behind this one.
        let wait = (n - self.level) / self.rate;
        self.level -= n;
        // A tiny rate gives a wait beyond any Duration: wait "forever" (the phase's end stops
        // it) rather than panic.
        Some(Duration::try_from_secs_f64(wait).unwrap_or(Duration::MAX))
    }
}

/// A phase's caps, shared by everything that sends in it: the open-loop dispatcher, the
/// closed-loop users, and the later turns of conversations. Every request takes the run-wide
/// permit, the phase's permit (`max_in_flight`) and its requested tokens from the bucket
/// (`max_tokens_per_s`), or is dropped as the phase's `when_capped` says. Waiting never runs
/// past the phase's end.
pub struct PhaseCaps {
    global: Arc<Semaphore>,
    phase: Option<Arc<Semaphore>>,
    bucket: Option<std::sync::Mutex<TokenBucket>>,
    policy: CapPolicy,
    end: Instant,
}

/// Outcome of [`PhaseCaps::take`].
pub enum Taken {
    /// Send, holding these permits until the request ends.
    Send(Permits),
    /// A cap is full and the phase drops what it cannot send at once.
    Dropped,
    /// The phase ended while waiting.
    Ended,
    /// The run was cancelled while waiting.
    Cancelled,
}

impl PhaseCaps {
    /// The caps of a phase ending at `end`, under the run-wide cap `global`.
    #[must_use]
    pub fn new(
        global: Arc<Semaphore>,
        max_in_flight: Option<usize>,
        max_tokens_per_s: Option<f64>,
        policy: CapPolicy,
        end: Instant,
    ) -> Self {
        Self {
            global,
            phase: max_in_flight.map(|n| Arc::new(Semaphore::new(n.max(1)))),
            bucket: max_tokens_per_s.map(|r| std::sync::Mutex::new(TokenBucket::new(r))),
            policy,
            end,
        }
    }

    /// The phase's end.
    #[must_use]
    pub fn end(&self) -> Instant {
        self.end
    }

    /// Takes room for one request asking for `max_tokens` output tokens (validation makes
    /// every request of a phase with `max_tokens_per_s` ask for some).
    pub async fn take(&self, max_tokens: Option<u32>, cancel: &CancellationToken) -> Taken {
        if let (Some(bucket), Some(n)) = (&self.bucket, max_tokens) {
            let granted = bucket
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .reserve(f64::from(n), self.policy);
            match granted {
                None => return Taken::Dropped,
                Some(wait) if !wait.is_zero() => {
                    if Instant::now()
                        .checked_add(wait)
                        .is_none_or(|t| t > self.end)
                    {
                        return Taken::Ended;
                    }
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = cancel.cancelled() => return Taken::Cancelled,
                    }
                }
                Some(_) => {}
            }
        }
        let permits = acquire(&self.global, self.phase.as_ref(), self.policy, cancel);
        match tokio::time::timeout_at(self.end, permits).await {
            Ok(Acquired::Yes(p)) => Taken::Send(p),
            Ok(Acquired::Full) => Taken::Dropped,
            Ok(Acquired::Cancelled) => Taken::Cancelled,
            Err(_) => Taken::Ended,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Paused time: the bucket refills as the test advances the clock, without waiting.
    #[tokio::test(start_paused = true)]
    async fn token_bucket_waits_or_drops() {
        let mut b = TokenBucket::new(100.0);
        assert_eq!(b.reserve(80.0, CapPolicy::Wait), Some(Duration::ZERO));
        // 20 left: 50 more must wait 0.3 s at 100 tokens/s.
        let w = b.reserve(50.0, CapPolicy::Wait).unwrap();
        assert!((w.as_secs_f64() - 0.3).abs() < 0.01, "{w:?}");
        // Now at -30: a dropping caller is refused until the bucket refills.
        assert_eq!(b.reserve(10.0, CapPolicy::Drop), None);
        tokio::time::advance(Duration::from_millis(400)).await;
        assert_eq!(b.reserve(10.0, CapPolicy::Drop), Some(Duration::ZERO));
    }
}

//! Fault knobs: an injected error rate and latency spikes on a fixed schedule.

use std::{
    sync::Mutex,
    time::{Duration, Instant},
};

use super::{config::FaultConfig, sampler::Rng};

/// Fault injector of one server.
#[derive(Debug)]
pub struct Faults {
    cfg: FaultConfig,
    start: Instant,
    rng: Mutex<Rng>,
}

impl Faults {
    /// Spikes are scheduled from `start`.
    #[must_use]
    pub fn new(cfg: &FaultConfig, start: Instant) -> Self {
        Self {
            cfg: cfg.clone(),
            start,
            rng: Mutex::new(Rng::new(cfg.seed)),
        }
    }

    /// Draws whether this request gets an injected error.
    pub fn inject_error(&self) -> bool {
        if self.cfg.error_rate <= 0.0 {
            return false;
        }
        let mut r = self
            .rng
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        r.next_f64() < self.cfg.error_rate
    }

    /// Delay of a request arriving at `now`: `spike_delay_ms` inside a spike window
    /// (the first `spike_duration_ms` of every `spike_every_ms`), else zero.
    #[must_use]
    pub fn delay(&self, now: Instant) -> Duration {
        if self.cfg.spike_every_ms == 0 || self.cfg.spike_delay_ms == 0 {
            return Duration::ZERO;
        }
        let t = now.saturating_duration_since(self.start).as_millis() as u64;
        if t % self.cfg.spike_every_ms < self.cfg.spike_duration_ms {
            Duration::from_millis(self.cfg.spike_delay_ms)
        } else {
            Duration::ZERO
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_rate_is_respected() {
        let f = Faults::new(
            &FaultConfig {
                error_rate: 0.1,
                ..FaultConfig::default()
            },
            Instant::now(),
        );
        let n = (0..10_000).filter(|_| f.inject_error()).count();
        assert!((800..1200).contains(&n), "{n}");
        let none = Faults::new(&FaultConfig::default(), Instant::now());
        assert!(!(0..1000).any(|_| none.inject_error()));
    }

    #[test]
    fn spikes_follow_the_schedule() {
        let t0 = Instant::now();
        let f = Faults::new(
            &FaultConfig {
                spike_every_ms: 1000,
                spike_duration_ms: 100,
                spike_delay_ms: 500,
                ..FaultConfig::default()
            },
            t0,
        );
        assert_eq!(
            f.delay(t0 + Duration::from_millis(50)),
            Duration::from_millis(500)
        );
        assert_eq!(f.delay(t0 + Duration::from_millis(500)), Duration::ZERO);
        assert_eq!(
            f.delay(t0 + Duration::from_millis(2050)),
            Duration::from_millis(500)
        );
    }
}

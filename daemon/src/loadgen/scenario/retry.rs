//! `request.retry`: the retry policy a scenario gives a phase (what is retried, how often,
//! with which backoff); the outages and the MSR it yields are measured in
//! [`crate::measure::resilience`].

use std::time::Duration;

use serde::Deserialize;

use crate::measure::record::RequestRecord;

pub use crate::measure::resilience::RetryOn;

use crate::loadgen::scenario::limits::de_duration;

/// `request.retry`: resend a request that failed the way an outage does.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RetrySpec {
    /// Retries after the first attempt (1..=10, default 3).
    #[serde(default = "default_max")]
    pub max: u32,
    /// Wait before the first retry, doubled before each next one (default 100ms).
    #[serde(default = "default_backoff", deserialize_with = "de_duration")]
    pub backoff: Duration,
    /// Which failures are retried (default all four).
    #[serde(default = "default_on")]
    pub on: Vec<RetryOn>,
    /// `T_max` of the MSR (default 800ms).
    #[serde(default, deserialize_with = "de_opt_t_max")]
    pub t_max: Option<Duration>,
}

fn default_max() -> u32 {
    3
}

fn default_backoff() -> Duration {
    Duration::from_millis(100)
}

fn default_on() -> Vec<RetryOn> {
    vec![
        RetryOn::Connect,
        RetryOn::Transport,
        RetryOn::ServerError,
        RetryOn::Timeout,
    ]
}

fn de_opt_t_max<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    de_duration(d).map(Some)
}

impl RetrySpec {
    /// Whether `rec`, attempt number `attempt` (1-based), is retried.
    #[must_use]
    pub fn retries(&self, rec: &RequestRecord, attempt: u32) -> bool {
        attempt <= self.max && RetryOn::of(rec).is_some_and(|c| self.on.contains(&c))
    }

    /// The wait before attempt `attempt + 1`.
    #[must_use]
    pub fn wait_after(&self, attempt: u32) -> Duration {
        self.backoff
            .saturating_mul(1 << attempt.saturating_sub(1).min(16))
    }

    /// `T_max`, ms.
    #[must_use]
    pub fn t_max_ms(&self) -> f64 {
        self.t_max
            .map_or(crate::measure::resilience::DEFAULT_T_MAX_MS, |d| {
                d.as_secs_f64() * 1000.0
            })
    }
}

//! The model-service resilience coefficient (MSR) of a phase with a retry policy
//! (`request.retry`).
//!
//! `MSR = (1 - T_failover / T_max) * R_retry`, with
//! - `T_failover`: the longest outage of the phase, from the first failure of an outage (a
//!   request ending in `connect`, `transport`, `timeout` or an HTTP 5xx) to the first success
//!   after it; an
//!   outage still open when the phase ends lasts until then (never shorter than `T_max` is
//!   then assumed: it did not recover). No outage: 0.
//! - `T_max`: 800 ms unless `retry.t_max` says otherwise; `T_failover > T_max` makes the first
//!   factor 0.
//! - `R_retry`: successful retries / retries over the last 60 s of the phase (the seed's sliding
//!   window, read at its end); no retry in that window: 1 (nothing needed retrying).
//!
//! Grades: >= 0.9 high, 0.7-0.9 medium, < 0.7 low.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::record::{ErrorClass, RequestRecord};

/// A failure a retry policy covers.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
pub enum RetryOn {
    /// The connection could not be made.
    #[serde(rename = "connect")]
    Connect,
    /// The connection failed during the exchange (reset or closed by a server going away).
    #[serde(rename = "transport")]
    Transport,
    /// An HTTP 5xx answer.
    #[serde(rename = "5xx")]
    ServerError,
    /// No complete answer within the timeout.
    #[serde(rename = "timeout")]
    Timeout,
}

impl RetryOn {
    /// The failure class of `rec`, if it is one a policy can cover.
    #[must_use]
    pub fn of(rec: &RequestRecord) -> Option<Self> {
        match rec.error? {
            ErrorClass::Connect => Some(RetryOn::Connect),
            ErrorClass::Transport => Some(RetryOn::Transport),
            ErrorClass::Timeout => Some(RetryOn::Timeout),
            ErrorClass::HttpStatus if rec.status.is_some_and(|s| s >= 500) => {
                Some(RetryOn::ServerError)
            }
            _ => None,
        }
    }
}

/// `T_max` unless the policy says otherwise, milliseconds.
pub const DEFAULT_T_MAX_MS: f64 = 800.0;
/// The window `R_retry` is read over, microseconds.
pub const RETRY_WINDOW_US: u64 = 60_000_000;

/// Outages and retries seen so far in a phase.
#[derive(Debug, Clone, Default)]
pub struct Tracker {
    last_us: u64,
    open_since_us: Option<u64>,
    outages: u64,
    worst_us: u64,
    retries: VecDeque<(u64, bool)>,
    retries_total: u64,
    retries_ok: u64,
}

impl Tracker {
    /// A request (first attempt or retry) ended at `at_us`: `failed` says whether it failed
    /// the way an outage does.
    pub fn observe(&mut self, failed: bool, at_us: u64) {
        self.last_us = self.last_us.max(at_us);
        match (failed, self.open_since_us) {
            (true, None) => {
                self.open_since_us = Some(at_us);
                self.outages += 1;
            }
            (false, Some(since)) => {
                self.worst_us = self.worst_us.max(at_us.saturating_sub(since));
                self.open_since_us = None;
            }
            _ => {}
        }
    }

    /// A retry ended at `at_us`, successfully or not.
    pub fn retry(&mut self, ok: bool, at_us: u64) {
        self.retries_total += 1;
        self.retries_ok += u64::from(ok);
        self.retries.push_back((at_us, ok));
        while self
            .retries
            .front()
            .is_some_and(|(t, _)| at_us.saturating_sub(*t) > RETRY_WINDOW_US)
        {
            self.retries.pop_front();
        }
    }

    /// The phase's resilience, read after its last request (an outage still open lasts until
    /// then).
    #[must_use]
    pub fn finish(&self, t_max_ms: f64) -> Resilience {
        let end_us = self.last_us;
        let unrecovered = self.open_since_us.is_some();
        let open = self
            .open_since_us
            .map_or(0, |since| end_us.saturating_sub(since));
        let failover_ms = self.worst_us.max(open) as f64 / 1000.0;
        let recent = self.retries.len() as u64;
        let recent_ok = self.retries.iter().filter(|(_, ok)| *ok).count() as u64;
        let r_retry = if recent == 0 {
            1.0
        } else {
            recent_ok as f64 / recent as f64
        };
        let msr = msr(
            if unrecovered {
                failover_ms.max(t_max_ms)
            } else {
                failover_ms
            },
            t_max_ms,
            r_retry,
        );
        Resilience {
            retries: self.retries_total,
            retries_succeeded: self.retries_ok,
            r_retry,
            outages: self.outages,
            failover_ms,
            unrecovered,
            t_max_ms,
            msr,
            grade: Grade::of(msr),
        }
    }
}

/// `(1 - T_failover / T_max) * R_retry`, the first factor clamped to 0..=1.
#[must_use]
pub fn msr(failover_ms: f64, t_max_ms: f64, r_retry: f64) -> f64 {
    let f = if t_max_ms > 0.0 {
        (1.0 - failover_ms / t_max_ms).clamp(0.0, 1.0)
    } else {
        0.0
    };
    f * r_retry.clamp(0.0, 1.0)
}

/// MSR grade.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Grade {
    /// >= 0.9.
    High,
    /// 0.7 to 0.9.
    Medium,
    /// < 0.7.
    Low,
}

impl Grade {
    /// `high`, `medium`, `low`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Grade::High => "high",
            Grade::Medium => "medium",
            Grade::Low => "low",
        }
    }

    /// The grade of `msr`.
    #[must_use]
    pub fn of(msr: f64) -> Self {
        if msr >= 0.9 {
            Grade::High
        } else if msr >= 0.7 {
            Grade::Medium
        } else {
            Grade::Low
        }
    }
}

/// A phase's resilience (part of the report when the phase has a retry policy).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Resilience {
    /// Retries sent.
    pub retries: u64,
    /// Retries that succeeded.
    pub retries_succeeded: u64,
    /// Successful / all retries over the phase's last 60 s (1 without retries).
    pub r_retry: f64,
    /// Outages (runs of failures ended by a success, or by the phase's end).
    pub outages: u64,
    /// The longest outage, ms.
    pub failover_ms: f64,
    /// An outage was still open when the phase ended.
    pub unrecovered: bool,
    /// `T_max`, ms.
    pub t_max_ms: f64,
    /// The coefficient.
    pub msr: f64,
    /// Its grade.
    pub grade: Grade,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formula_and_grades_on_hand_computed_cases() {
        // 200 ms of failover of 800, 9 of 10 retries: 0.75 * 0.9 = 0.675, low.
        assert!((msr(200.0, 800.0, 0.9) - 0.675).abs() < 1e-12);
        assert_eq!(Grade::of(0.675), Grade::Low);
        assert!((msr(0.0, 800.0, 1.0) - 1.0).abs() < 1e-12);
        assert!(msr(900.0, 800.0, 1.0).abs() < 1e-12);
        assert!((msr(80.0, 800.0, 1.0) - 0.9).abs() < 1e-12);
        assert_eq!(Grade::of(0.9), Grade::High);
        assert_eq!(Grade::of(0.7), Grade::Medium);
    }

    #[test]
    fn outages_run_from_first_failure_to_first_success() {
        let mut t = Tracker::default();
        t.observe(false, 1_000);
        t.observe(true, 2_000);
        t.observe(true, 2_500);
        t.observe(false, 302_000); // outage of 300 ms
        t.observe(true, 400_000);
        t.observe(false, 450_000); // 50 ms
        t.retry(true, 300_000);
        t.retry(false, 310_000);
        let r = t.finish(800.0);
        assert_eq!(r.outages, 2);
        assert!((r.failover_ms - 300.0).abs() < 1e-9);
        assert!(!r.unrecovered);
        assert!((r.r_retry - 0.5).abs() < 1e-12);
        // (1 - 300/800) * 0.5
        assert!((r.msr - 0.3125).abs() < 1e-12);
    }

    #[test]
    fn edge_cases_no_outage_no_retry_and_no_recovery() {
        let r = Tracker::default().finish(800.0);
        assert_eq!((r.msr, r.r_retry, r.outages), (1.0, 1.0, 0));
        let mut t = Tracker::default();
        t.observe(true, 1_000);
        t.observe(true, 101_000);
        let r = t.finish(800.0);
        // Open for 100 ms at the end: not recovered, so at least T_max: MSR 0.
        assert!(r.unrecovered);
        assert!(r.msr.abs() < 1e-12);
        // Retries older than 60 s leave the window.
        let mut t = Tracker::default();
        t.retry(false, 0);
        t.retry(true, 61_000_001);
        let r = t.finish(800.0);
        assert_eq!((r.retries, r.retries_succeeded), (2, 1));
        assert!((r.r_retry - 1.0).abs() < 1e-12);
    }
}

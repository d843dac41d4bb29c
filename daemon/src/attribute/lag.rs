//! How much of a phase the load generator's lag touched, and which of its percentiles that can
//! move.
//!
//! A window is the generator's (`loadgen`) when it sent late or not at all. Its requests (and
//! the arrivals it never sent) may carry wrong latencies. They can decide a percentile `p` of
//! the phase only if they are more than `1 - p` of the phase's requests: below 1% they could
//! not even fill the slowest 1%, so the p99 stands; past 50% the median could be theirs. The
//! phase is untrustworthy when a percentile the reports show (p50, p95, p99) could be moved.

use serde::{Deserialize, Serialize};

use super::{WindowVerdict, verdict::Cause};
use crate::collect::timeline::Window;

/// The percentiles the reports show, by the share of requests beyond each.
const SHOWN: [(&str, f64); 3] = [("p50", 0.5), ("p95", 0.05), ("p99", 0.01)];

/// The generator's lag in a phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Lag {
    /// Windows where it lagged.
    pub windows: usize,
    /// The share of the phase's requests (sent, and arrivals never sent) in those windows.
    pub request_share: f64,
    /// The latest send in those windows, ms after its intended time (`None`: none was sent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_ms: Option<f64>,
    /// The shown percentiles those requests could move (`p50`, `p95`, `p99`), lowest first.
    pub moved: Vec<String>,
    /// The warning in words ([`Lag::line`]).
    pub said: String,
}

impl Lag {
    /// The lag of the windows `idx` (a phase's), `None` where the generator kept up.
    #[must_use]
    pub fn of(idx: &[usize], windows: &[Window], verdicts: &[WindowVerdict]) -> Option<Self> {
        let asked = |i: usize| {
            windows[i]
                .load
                .as_ref()
                .map_or(0, |l| l.requests + l.unsent.unwrap_or(0))
        };
        let lagging: Vec<usize> = idx
            .iter()
            .copied()
            .filter(|&i| verdicts[i].verdict.cause == Cause::Loadgen)
            .collect();
        if lagging.is_empty() {
            return None;
        }
        let all: u64 = idx.iter().map(|&i| asked(i)).sum();
        let theirs: u64 = lagging.iter().map(|&i| asked(i)).sum();
        let request_share = if all == 0 {
            1.0
        } else {
            theirs as f64 / all as f64
        };
        let late_ms = lagging
            .iter()
            .filter_map(|&i| Some(windows[i].load.as_ref()?.send_lag_ms.as_ref()?.max))
            .reduce(f64::max);
        let mut lag = Self {
            windows: lagging.len(),
            request_share,
            late_ms,
            moved: moved(request_share),
            said: String::new(),
        };
        lag.said = lag.line(idx.len());
        Some(lag)
    }

    /// Whether a percentile the reports show could be the lagging requests'.
    #[must_use]
    pub fn untrustworthy(&self) -> bool {
        !self.moved.is_empty()
    }

    /// The warning, with its size: `the load generator lagged in 3 of 90 windows (4% of the
    /// phase's requests, sent up to 850 ms late): its p99 is untrustworthy, its p50 and p95
    /// stand`.
    #[must_use]
    pub fn line(&self, of: usize) -> String {
        let late = self.late_ms.map_or_else(String::new, |ms| {
            format!(", sent up to {} late", human_ms(ms))
        });
        let size = format!(
            "the load generator lagged in {} of {of} windows ({} of the phase's requests{late})",
            self.windows,
            percent(self.request_share)
        );
        let stand: Vec<&str> = SHOWN
            .iter()
            .map(|(n, _)| *n)
            .filter(|n| !self.moved.iter().any(|m| m == n))
            .collect();
        match (self.moved.as_slice(), stand.as_slice()) {
            ([], _) => format!(
                "{size}: too few to move its p99 (more than 1% would be), its latencies stand"
            ),
            (_, []) => format!("{size}: its latencies are untrustworthy"),
            (moved, stand) => format!(
                "{size}: its {} {} untrustworthy, its {} stand{}",
                moved.join(" and "),
                if moved.len() == 1 { "is" } else { "are" },
                stand.join(" and "),
                if stand.len() == 1 { "s" } else { "" }
            ),
        }
    }
}

/// The shown percentiles that requests holding `share` of a phase's could decide.
fn moved(share: f64) -> Vec<String> {
    SHOWN
        .iter()
        .filter(|(_, beyond)| share > *beyond)
        .map(|(name, _)| (*name).to_owned())
        .collect()
}

fn percent(share: f64) -> String {
    let p = share * 100.0;
    if p > 0.0 && p < 1.0 {
        format!("{p:.1}%")
    } else {
        format!("{p:.0}%")
    }
}

fn human_ms(ms: f64) -> String {
    if ms >= 1000.0 {
        format!("{:.1} s", ms / 1000.0)
    } else {
        format!("{ms:.0} ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lag(share: f64) -> Lag {
        Lag {
            windows: 1,
            request_share: share,
            late_ms: Some(250.0),
            moved: moved(share),
            said: String::new(),
        }
    }

    #[test]
    fn the_warning_names_what_the_lagging_share_can_move() {
        let l = lag(0.008);
        assert!(!l.untrustworthy());
        assert_eq!(
            l.line(90),
            "the load generator lagged in 1 of 90 windows (0.8% of the phase's requests, sent up to 250 ms late): too few to move its p99 (more than 1% would be), its latencies stand"
        );
        assert!(
            lag(0.03)
                .line(90)
                .ends_with(": its p99 is untrustworthy, its p50 and p95 stand")
        );
        assert!(
            lag(0.2)
                .line(90)
                .ends_with(": its p95 and p99 are untrustworthy, its p50 stands")
        );
        let all = lag(1.0);
        assert!(all.untrustworthy());
        assert!(all.line(20).ends_with(": its latencies are untrustworthy"));
    }
}

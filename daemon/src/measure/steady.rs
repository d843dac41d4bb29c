//! A phase's steady state: the span where its load held, and its latencies there beside the
//! whole phase's (warm-up, a ramp and the last requests' tail left out, as vLLM's and `AIPerf`'s
//! reports do). A closed loop held while its requests in flight were within 5% of its users;
//! an open loop while they were within 5% of the equilibrium its rate gives (Little's law: the
//! median in flight while it sent). The span runs from the first time in flight reached that
//! level to the last time it was there. Without records, or when no span of a second held,
//! there is none.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{
    metrics::{Hist, PhaseMetrics},
    record::RequestRecord,
    summary::Summary,
};
use crate::quantile::exact::rounded_rank;

/// Share of its target a held load reaches.
pub const HELD: f64 = 0.95;
/// Step at which the requests in flight are counted, µs.
const STEP_US: u64 = 100_000;
/// Shortest span called steady, µs.
const MIN_SPAN_US: u64 = 1_000_000;

/// The steady state of a phase in its report.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct SteadyState {
    /// Seconds from the phase's first send to the span's start.
    pub from_s: f64,
    /// Seconds from the phase's first send to the span's end.
    pub to_s: f64,
    /// Seconds from the phase's first send to its last: the whole phase, to compare with.
    pub sending_s: f64,
    /// The requests in flight the load held at: the users, or the open loop's equilibrium.
    pub in_flight: f64,
    /// `users` (closed loop) or `equilibrium` (open loop).
    pub basis: String,
    /// Requests sent in the span.
    pub requests: u64,
    /// Their latency summaries in ms (`ttft`, `itl`, `e2e`), as the phase's `latency_ms`.
    pub latency_ms: BTreeMap<String, Summary>,
}

/// The steady state of the requests of one phase, `users` its closed loop's (`None` for an
/// open loop).
#[must_use]
pub fn of_phase(records: &[&RequestRecord], users: Option<usize>) -> Option<SteadyState> {
    let mut starts: Vec<u64> = records.iter().map(|r| r.actual_us).collect();
    let mut ends: Vec<u64> = records.iter().map(|r| r.end_us.max(r.actual_us)).collect();
    starts.sort_unstable();
    ends.sort_unstable();
    let (&first, &last) = (starts.first()?, starts.last()?);
    let in_flight = |t: u64| {
        starts.partition_point(|&s| s <= t) as f64 - ends.partition_point(|&e| e <= t) as f64
    };
    let steps: Vec<(u64, f64)> = (first..=last)
        .step_by(STEP_US as usize)
        .map(|t| (t, in_flight(t)))
        .collect();
    let (target, basis) = if let Some(u) = users {
        (u as f64, "users")
    } else {
        let mut v: Vec<f64> = steps.iter().map(|s| s.1).collect();
        v.sort_by(f64::total_cmp);
        (rounded_rank(&v, 0.5)?, "equilibrium")
    };
    if target < 1.0 {
        return None;
    }
    let held = |s: &&(u64, f64)| s.1 >= HELD * target;
    let from = steps.iter().find(held)?.0;
    let to = steps.iter().rev().find(held)?.0;
    if to - from < MIN_SPAN_US {
        return None;
    }
    let mut m = PhaseMetrics::default();
    for r in records
        .iter()
        .filter(|r| (from..=to).contains(&r.actual_us))
    {
        m.record(r);
    }
    let secs = |us: u64| (us - first) as f64 / 1e6;
    Some(SteadyState {
        from_s: secs(from),
        to_s: secs(to),
        sending_s: secs(last),
        in_flight: target,
        basis: basis.to_owned(),
        requests: m.finished,
        latency_ms: [Hist::Ttft, Hist::Itl, Hist::E2e]
            .into_iter()
            .map(|h| (h.name().to_owned(), m.summary(h)))
            .filter(|(_, s)| s.count > 0)
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::record::Endpoint;

    fn req(id: u64, start_ms: u64, e2e_ms: u64) -> RequestRecord {
        let mut r = RequestRecord::new(id, 0, Endpoint::Chat, start_ms * 1000);
        r.actual_us = start_ms * 1000;
        r.token_us = vec![start_ms * 1000 + 10_000];
        r.end_us = (start_ms + e2e_ms) * 1000;
        r
    }

    #[test]
    fn a_closed_loop_ramp_is_left_out_of_its_steady_state() {
        // 10 users start one a second, then each sends 500 ms requests back to back.
        let mut rs = Vec::new();
        for u in 0..10u64 {
            let mut t = u * 1000;
            while t < 30_000 {
                rs.push(req(rs.len() as u64, t, 500));
                t += 500;
            }
        }
        let refs: Vec<&RequestRecord> = rs.iter().collect();
        let s = of_phase(&refs, Some(10)).unwrap();
        assert_eq!(s.basis, "users");
        // Held from the tenth user's start (9 s) to the last sends.
        assert!((s.from_s - 9.0).abs() < 0.2, "{s:?}");
        assert!(s.to_s > 29.0 && s.sending_s > 29.0, "{s:?}");
        assert!(s.requests < rs.len() as u64);
        assert!(s.latency_ms["e2e"].count > 0);
    }

    #[test]
    fn an_open_loop_holds_at_its_equilibrium_and_a_thin_one_has_none() {
        // 20 req/s of 1 s requests: 20 in flight once the first second has passed.
        let rs: Vec<RequestRecord> = (0..400).map(|i| req(i, i * 50, 1000)).collect();
        let refs: Vec<&RequestRecord> = rs.iter().collect();
        let s = of_phase(&refs, None).unwrap();
        assert_eq!(s.basis, "equilibrium");
        assert!((s.in_flight - 20.0).abs() < 1.5, "{s:?}");
        assert!(s.from_s > 0.8 && s.from_s < 1.1, "{s:?}");
        // 1 req/s of 10 ms requests: nothing in flight to hold.
        let thin: Vec<RequestRecord> = (0..20).map(|i| req(i, i * 1000, 10)).collect();
        let refs: Vec<&RequestRecord> = thin.iter().collect();
        assert!(of_phase(&refs, None).is_none());
    }
}

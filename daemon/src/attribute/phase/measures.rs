//! A phase's load and latencies, from its windows.

use std::collections::BTreeMap;

use super::summary::{PhaseLatency, PhaseLoad};
use crate::collect::timeline::{Quantiles, Window};

/// The load of a phase's windows: requests and errors (with their classes), the achieved rate
/// over the windows' length, the mean target rate and output tokens/s, the most requests in
/// flight and the arrivals never sent.
pub(super) fn load(ws: &[&Window]) -> PhaseLoad {
    let loads: Vec<_> = ws.iter().filter_map(|w| w.load.as_ref()).collect();
    let secs: f64 = ws.iter().map(|w| w.len_ms as f64 / 1000.0).sum();
    let targets: Vec<f64> = loads.iter().filter_map(|l| l.target_rps).collect();
    let requests = loads.iter().map(|l| l.requests).sum();
    PhaseLoad {
        requests,
        errors: loads.iter().map(|l| l.errors).sum(),
        achieved_rps: if secs > 0.0 {
            requests as f64 / secs
        } else {
            0.0
        },
        target_rps: (!targets.is_empty())
            .then(|| targets.iter().sum::<f64>() / targets.len() as f64),
        output_tokens_per_s: if loads.is_empty() {
            0.0
        } else {
            loads.iter().map(|l| l.output_tokens_per_s).sum::<f64>() / loads.len() as f64
        },
        in_flight_max: loads.iter().map(|l| l.in_flight_max).max().unwrap_or(0),
        unsent: loads.iter().filter_map(|l| l.unsent).sum(),
        error_classes: loads.iter().flat_map(|l| l.error_classes.iter()).fold(
            BTreeMap::new(),
            |mut m, (c, n)| {
                *m.entry(*c).or_default() += n;
                m
            },
        ),
    }
}

pub(super) fn latency(ws: &[&Window]) -> PhaseLatency {
    let merge = |get: fn(&crate::collect::timeline::LoadSignals) -> Option<Quantiles>| {
        let parts: Vec<(f64, Quantiles)> = ws
            .iter()
            .filter_map(|w| w.load.as_ref())
            .filter_map(|l| get(l).map(|q| ((l.requests.max(1)) as f64, q)))
            .collect();
        let total: f64 = parts.iter().map(|(n, _)| n).sum();
        (total > 0.0).then(|| {
            let mean =
                |f: fn(&Quantiles) -> f64| parts.iter().map(|(n, q)| n * f(q)).sum::<f64>() / total;
            Quantiles {
                p50: mean(|q| q.p50),
                p95: mean(|q| q.p95),
                p99: mean(|q| q.p99),
                max: parts.iter().map(|(_, q)| q.max).fold(0.0, f64::max),
            }
        })
    };
    PhaseLatency {
        exact: false,
        ttft_ms: merge(|l| l.ttft_ms),
        itl_ms: merge(|l| l.itl_ms),
        e2e_ms: merge(|l| l.e2e_ms),
    }
}

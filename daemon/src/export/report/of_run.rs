//! The explained report of a load run: the collectors' time line, realigned to the load's start,
//! with the load's records folded in, the per-request waterfalls, and the phases' exact
//! latencies from the load generator. `stress --explain` and anything else that runs a load
//! with a [`Node`](crate::collect::node::Node) beside it build their report here.

use super::{PhaseLatency, Report, RunMeta, waterfall};
use crate::collect::{load, node::Finished, timeline::Quantiles};
use crate::loadgen;

impl Report {
    /// The report of load run `lg`, watched by a node that ended with `finished`.
    #[must_use]
    pub fn of_run(lg: &loadgen::StressReport, finished: Finished) -> Self {
        let Finished {
            mut timeline,
            server_side,
            missing,
            ..
        } = finished;
        let start_ms = lg.started_unix_ns / 1_000_000;
        // The windows were closed in step with the load, which started a few ms after the
        // collectors: label them so, and the load's last requests fall in the last window.
        timeline.realign(start_ms);
        load::fold_records(&mut timeline, lg, &server_side);
        let end_ms = start_ms + (lg.elapsed_s * 1000.0) as u64;
        let meta = RunMeta::new(&lg.scenario, &lg.target, start_ms, end_ms, timeline.len_ms);
        let waterfalls = waterfall::build(lg, &server_side.exchanges, &timeline);
        let mut report = Report::new(meta, timeline)
            .with_waterfalls(waterfalls)
            .with_missing_evidence(missing);
        for p in &lg.phases {
            let q = |k: &str| {
                p.latency_ms
                    .get(k)
                    .filter(|s| s.count > 0)
                    .map(|s| Quantiles {
                        p50: s.p50,
                        p95: s.p95,
                        p99: s.p99,
                        max: s.max,
                    })
            };
            report.set_phase_latency(
                &p.name,
                PhaseLatency {
                    exact: true,
                    ttft_ms: q("ttft"),
                    itl_ms: q("itl"),
                    e2e_ms: q("e2e"),
                },
            );
        }
        report
    }
}

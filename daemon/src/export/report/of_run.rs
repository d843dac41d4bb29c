//! The explained report of a load run: the collectors' time line, realigned to the load's start,
//! with the load's records folded in, the per-request waterfalls, and the phases' exact
//! latencies from the load generator. `stress --explain` (with a
//! [`Node`](crate::node::Node) beside the load) and `stress --html` (the load alone,
//! `load_only.rs`) build their reports here.

use super::{PhaseLatency, Report, RunMeta, waterfall};
use crate::attribute::{
    self, PhaseSummary,
    hops::{self, HopLine},
};
use crate::collect::{
    load,
    session::ServerSide,
    timeline::{Quantiles, Timeline},
};
use crate::measure::{PhaseReport, StressReport};
use crate::node::Finished;

impl Report {
    /// The report of load run `lg`, watched by a node that ended with `finished`.
    #[must_use]
    pub fn of_run(lg: &StressReport, finished: Finished) -> Self {
        let Finished {
            mut timeline,
            server_side,
            missing,
            services,
            ..
        } = finished;
        // The windows were closed in step with the load, which started a few ms after the
        // collectors: label them so, and the load's last requests fall in the last window.
        timeline.realign(start_ms(lg));
        let mut report = Self::of_load(lg, timeline, &server_side, missing);
        report.add_hops(services, start_ms(lg));
        report
    }

    /// Labels each service's time line (`--service`) with the target's phases, attributes it
    /// against its own baseline, and gives each phase its hops.
    fn add_hops(&mut self, services: Vec<(String, Timeline)>, start_ms: u64) {
        if services.is_empty() {
            return;
        }
        let lines: Vec<(String, Timeline, Vec<PhaseSummary>)> = services
            .into_iter()
            .map(|(name, mut t)| {
                t.realign(start_ms);
                hops::label_phases(&self.timeline, &mut t);
                let phases = attribute::attribute(&t).phases;
                (name, t, phases)
            })
            .collect();
        let hop_lines: Vec<HopLine<'_>> = lines
            .iter()
            .map(|(name, timeline, phases)| HopLine {
                name,
                timeline,
                phases,
            })
            .collect();
        for p in &mut self.phases {
            p.hops = hops::of_phase(&self.timeline, p, &hop_lines);
        }
    }

    /// The report of `lg`'s records folded into `timeline`, joined with the kernel's view of
    /// the server (`server_side`), with `missing` evidence.
    pub(super) fn of_load<I: IntoIterator<Item = S>, S: Into<String>>(
        lg: &StressReport,
        mut timeline: Timeline,
        server_side: &ServerSide,
        missing: I,
    ) -> Self {
        load::fold_records(&mut timeline, lg, server_side);
        let start_ms = start_ms(lg);
        let end_ms = start_ms + (lg.elapsed_s * 1000.0) as u64;
        let meta = RunMeta::new(&lg.scenario, &lg.target, start_ms, end_ms, timeline.len_ms);
        let waterfalls = waterfall::build(lg, &server_side.exchanges, &timeline);
        let mut report = Report::new(meta, timeline)
            .with_waterfalls(waterfalls)
            .with_missing_evidence(missing);
        for p in &lg.phases {
            report.set_phase_latency(&p.name, exact_latency(p));
        }
        report
    }
}

/// The run's start, Unix ms.
pub(super) fn start_ms(lg: &StressReport) -> u64 {
    lg.started_unix_ns / 1_000_000
}

/// A phase's exact latency quantiles from the load generator's report (ms).
#[must_use]
fn exact_latency(p: &PhaseReport) -> PhaseLatency {
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
    PhaseLatency {
        exact: true,
        ttft_ms: q("ttft"),
        itl_ms: q("itl"),
        e2e_ms: q("e2e"),
    }
}

//! The report page of a run's load alone (`stress --html PATH` without `--explain`): the
//! generator's records folded into a time line of windows, the phases' exact latencies and
//! sampled waterfalls, rendered by the same page as an explained run. No server, kernel or GPU
//! evidence was collected, and the page says so; its verdicts rest on the load alone.

use crate::attribute::PhaseLatency;
use crate::collect::{
    load,
    session::ServerSide,
    timeline::{Quantiles, Timeline},
};
use crate::loadgen::{PhaseReport, StressReport};

use super::{Report, RunMeta, waterfall};

/// Window length of a load-only report, ms.
pub const WINDOW_MS: u64 = 1000;

/// What a load-only report lacks, first in its missing evidence.
pub const NOTE: &str =
    "load only (stress without --explain): no server metrics, kernel or GPU evidence was collected";

/// The report of `lg`'s load in [`WINDOW_MS`] windows. Needs the run's records (a run with
/// `--no-records` has none: every chart is empty).
#[must_use]
pub fn report(lg: &StressReport) -> Report {
    let start_ms = lg.started_unix_ns / 1_000_000;
    let mut timeline = Timeline::new(start_ms, WINDOW_MS);
    load::fold_records(&mut timeline, lg, &ServerSide::default());
    let end_ms = start_ms + (lg.elapsed_s * 1000.0) as u64;
    let meta = RunMeta::new(&lg.scenario, &lg.target, start_ms, end_ms, timeline.len_ms);
    let waterfalls = waterfall::build(lg, &[], &timeline);
    let mut r = Report::new(meta, timeline)
        .with_waterfalls(waterfalls)
        .with_missing_evidence([NOTE]);
    for p in &lg.phases {
        r.set_phase_latency(&p.name, exact_latency(p));
    }
    r
}

/// A phase's exact latency quantiles from the load generator's report (ms).
#[must_use]
pub fn exact_latency(p: &PhaseReport) -> PhaseLatency {
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

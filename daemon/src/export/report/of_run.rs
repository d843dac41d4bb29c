//! The explained report of a load run: the collectors' time line, realigned to the load's start,
//! with the load's records folded in, the per-request waterfalls, and the phases' exact
//! latencies from the load generator. `stress --explain` (with a
//! [`Node`](crate::node::Node) beside the load) and `stress --html` (the load alone,
//! `load_only.rs`) build their reports here.

use super::{CallsSeen, PhaseLatency, Report, RunMeta, waterfall};
use crate::collect::{
    load,
    load_fold::LoadFold,
    session::ServerSide,
    timeline::{Quantiles, Timeline},
};
use crate::measure::{PhaseReport, StressReport};
use crate::node::Finished;

impl Report {
    /// The report of load run `lg`, watched by a node that ended with `finished`.
    #[must_use]
    pub fn of_run(lg: &StressReport, fold: &LoadFold, finished: Finished) -> Self {
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
        let report = Self::of_load(lg, fold, timeline, &server_side, missing);
        let pids = services
            .iter()
            .map(|s| (s.name.clone(), s.pids.clone()))
            .collect();
        let services = services
            .into_iter()
            .map(|mut s| {
                s.timeline.realign(start_ms(lg));
                (s.name, s.timeline)
            })
            .collect();
        let unix_ms = |ns: u64| load::clock::kernel_unix_ms(lg, ns);
        report.with_hops(
            services,
            &CallsSeen::Exchanges {
                exchanges: &server_side.exchanges,
                pids: &pids,
                unix_ms: &unix_ms,
            },
        )
    }

    /// The report of `lg`'s requests (`fold`) set into `timeline`, joined with the kernel's
    /// view of the server (`server_side`), with `missing` evidence and what was cut.
    pub(super) fn of_load<I: IntoIterator<Item = S>, S: Into<String>>(
        lg: &StressReport,
        fold: &LoadFold,
        mut timeline: Timeline,
        server_side: &ServerSide,
        missing: I,
    ) -> Self {
        load::fold_records(&mut timeline, lg, fold, server_side);
        let cut = [records_cut(lg), fold.cut()].into_iter().flatten();
        let missing = missing.into_iter().map(Into::<String>::into).chain(cut);
        let start_ms = start_ms(lg);
        let end_ms = start_ms + (lg.elapsed_s * 1000.0) as u64;
        let mut meta = RunMeta::new(&lg.scenario, &lg.target, start_ms, end_ms, timeline.len_ms);
        meta.provenance = lg.run.clone().unwrap_or_default();
        let waterfalls = waterfall::build(lg, &server_side.exchanges, &timeline);
        let mut report = Report::new(meta, timeline)
            .with_waterfalls(waterfalls)
            .with_missing_evidence(missing);
        for p in &lg.phases {
            report.set_phase_latency(&p.name, exact_latency(p));
            if let Some(trace) = &p.prefix {
                report.set_phase_prefix(&p.name, trace);
            }
        }
        report
    }
}

/// What the load generator's kept records leave out of the waterfalls, in one line; `None`
/// when they hold every request. The windows never depend on them.
fn records_cut(lg: &StressReport) -> Option<String> {
    let finished: u64 = lg.phases.iter().map(|p| p.counts.finished).sum();
    if lg.records.is_empty() && finished > 0 {
        Some("no waterfalls: no per-request records were kept (--no-records); the windows hold every request".into())
    } else {
        (lg.records_overflow > 0).then(|| {
            format!(
                "waterfalls are drawn from the first {} of {} requests: the records budget was spent (records_overflow); the windows hold every request",
                lg.records.len(),
                lg.records.len() as u64 + lg.records_overflow
            )
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn run(records: usize, overflow: u64, finished: u64) -> StressReport {
        let phase = serde_json::json!({
            "name": "p", "label": "p", "endpoint": "chat", "load_level": "1 req/s",
            "target_rate": 1.0, "duration_s": 1.0, "elapsed_s": 1.0,
            "counts": {"scheduled": finished, "dropped": 0, "finished": finished, "ok": finished, "good": finished, "errors": {}},
            "error_rate": 0.0, "requests_per_s": 0.0, "goodput_per_s": 0.0, "output_tokens": 0,
            "output_tokens_per_s": 0.0, "input_tokens": 0, "latency_ms": {},
            "stream_tokens_per_s": {"count": 0, "mean": 0.0, "p50": 0.0, "p90": 0.0, "p95": 0.0, "p99": 0.0, "p999": 0.0, "max": 0.0},
            "recall": {"count": 0, "mean": 0.0, "p50": 0.0, "p90": 0.0, "p95": 0.0, "p99": 0.0, "p999": 0.0, "max": 0.0},
            "histograms": {}, "slo": []
        });
        let mut lg: StressReport = serde_json::from_value(serde_json::json!({
            "schema": "inferscope.stress.report", "version": 1, "scenario": "t", "target": "http://x",
            "started_unix_ns": 1, "started_monotonic_ns": 1, "elapsed_s": 1.0, "stopped": null,
            "slo_pass": true, "phases": [phase], "events": [], "records": [],
            "records_overflow": overflow
        }))
        .unwrap();
        lg.records = (0..records as u64)
            .map(|i| crate::measure::RequestRecord::new(i, 0, crate::measure::Endpoint::Chat, i))
            .collect();
        lg
    }

    #[test]
    fn records_that_were_cut_are_named() {
        assert_eq!(records_cut(&run(10, 0, 10)), None);
        assert_eq!(records_cut(&run(0, 0, 0)), None, "no request: nothing cut");
        let none = records_cut(&run(0, 0, 10)).unwrap();
        assert!(none.starts_with("no waterfalls"), "{none}");
        let budget = records_cut(&run(6, 4, 10)).unwrap();
        assert!(budget.contains("the first 6 of 10 requests"), "{budget}");
    }
}

//! The run's requests set into the time line's windows (by intended start), with each
//! window's phase and what the kernel's view of the server adds.

use std::collections::BTreeMap;

use super::clock::unix_ms;
use super::joins::join_sample;
use super::marks::{mark_events, timeline_marks_before};
use super::phases::{label_phases, spread_unsent};
use crate::collect::{
    load_fold::{Acc, LoadFold},
    session::ServerSide,
    timeline::{LoadSignals, Timeline},
};
use crate::measure::StressReport;
use crate::quantile::{Quantile, exact::median};

/// Fills `load` of the windows `fold`'s requests started in, and every window's `phase`;
/// windows before the first request are dropped (the collectors started a little earlier).
/// The fold's windows count from the run's start, which the time line's windows are aligned
/// to (`Timeline::realign`); otherwise each lands in the window holding its start.
/// When the collectors' windows reach into the run, a request started after the last of them
/// (phases start one after another, so the run overshoots its planned end by a few ms) joins
/// the last one instead of making a window no collector closed.
/// Sampled requests joined with the server's exchanges give their windows' network transit,
/// and with the retransmits on their connections, the latency of the requests loss hit.
pub fn fold_records(
    timeline: &mut Timeline,
    report: &StressReport,
    fold: &LoadFold,
    server: &ServerSide,
) {
    let start_ms = unix_ms(report, 0);
    let mut last = None;
    if let Some(first) = fold.first_intended_us().map(|us| unix_ms(report, us)) {
        let closed = timeline.windows.len();
        if closed > timeline.index(first) {
            last = Some(closed - 1 - timeline.index(first));
        }
        timeline.at(first);
        let keep = timeline.windows.len() - timeline.index(first);
        timeline.retain_last(keep);
    }
    // The window of a time (unix ms), held within the collectors' last.
    let window_of = |timeline: &mut Timeline, mut at: u64| {
        if let Some(l) = last {
            at = at.min(timeline.origin_unix_ms + (l as u64 + 1) * timeline.len_ms - 1);
        }
        timeline.at(at);
        timeline.index(at)
    };
    let len = fold.len_ms();
    let accs = by_window(
        fold.windows()
            .iter()
            .map(|(k, a)| (window_of(timeline, start_ms + k * len), a)),
    );
    let mut joins = join_sample(timeline, report, fold.sample(), server, window_of);
    mark_events(timeline, report);
    let in_flight = fold.in_flight_max(|ms| timeline.index(start_ms + ms));
    label_phases(timeline, report, &accs);
    let len_s = timeline.len_ms as f64 / 1000.0;
    let marks = timeline.marks.clone();
    for (i, mut a) in accs {
        let Some(w) = timeline.windows.get_mut(i) else {
            continue;
        };
        let mut j = joins.remove(&i).unwrap_or_default();
        let phase = a
            .phases
            .iter()
            .max_by_key(|(_, n)| **n)
            .map(|(p, _)| *p as usize);
        let phase_report = phase.and_then(|p| report.phases.get(p));
        let end = w.start_unix_ms + w.len_ms;
        let phase_events_before = timeline_marks_before(&marks, w.phase.as_deref(), end);
        w.load = Some(LoadSignals {
            requests: a.requests,
            errors: a.errors,
            target_rps: phase_report.and_then(|p| p.target_rate),
            achieved_rps: a.requests as f64 / len_s,
            in_flight_max: in_flight.get(&i).copied().unwrap_or(0),
            ttft_ms: a.ttft.quantiles(),
            itl_ms: a.itl.quantiles(),
            e2e_ms: a.e2e.quantiles(),
            send_lag_ms: a.lag.quantiles(),
            output_tokens_per_s: a.tokens as f64 / len_s,
            endpoint: a.endpoints.iter().max_by_key(|(_, n)| **n).map(|(e, _)| *e),
            error_classes: std::mem::take(&mut a.error_classes),
            recall_mean: a.recall_mean(),
            phase_events_before,
            duplicate_prefill_share: j.duplicate_share(),
            duplicate_prefill_chance: j.duplicate_share().map(|_| j.chance),
            unsent: None,
        });
        w.requests = std::mem::take(&mut j.parts);
        if let Some(net) = w.net.as_mut() {
            net.transit_p50_ms = median(&j.transit);
            net.read_delay_p50_ms = median(&j.read_delay);
            net.loss_hit_requests = j.loss_hit_e2e.len() as u64;
            net.joined_requests = (j.loss_hit_e2e.len() + j.clean_e2e.len()) as u64;
            net.loss_hit_e2e_max_ms = j.loss_hit_e2e.iter().copied().reduce(f64::max);
            net.loss_clean_e2e_p50_ms = median(&j.clean_e2e);
        }
    }
    spread_unsent(timeline, report);
}

/// The fold's windows by time-line window; two of them land in one only when the time line is
/// not aligned to the run's start, and then the later one's counts join the earlier's.
fn by_window<'a>(accs: impl Iterator<Item = (usize, &'a Acc)>) -> BTreeMap<usize, Acc> {
    let mut out: BTreeMap<usize, Acc> = BTreeMap::new();
    for (i, a) in accs {
        out.entry(i).or_default().merge(a);
    }
    out
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::attribute::Cause;
    use crate::measure::{Endpoint, PhaseReport, RequestRecord};

    fn phase(name: &str, rate: f64) -> PhaseReport {
        let summary = serde_json::json!({"count": 0, "mean": 0.0, "p50": 0.0, "p90": 0.0, "p95": 0.0, "p99": 0.0, "p999": 0.0, "max": 0.0});
        serde_json::from_value(serde_json::json!({
            "name": name, "label": name, "endpoint": "chat", "load_level": format!("{rate} req/s"),
            "target_rate": rate, "duration_s": 2.0, "elapsed_s": 2.0, "counts": {"scheduled": 0, "dropped": 0, "finished": 0, "ok": 0, "good": 0, "errors": {}},
            "error_rate": 0.0, "requests_per_s": 0.0, "goodput_per_s": 0.0, "output_tokens": 0,
            "output_tokens_per_s": 0.0, "input_tokens": 0, "latency_ms": {}, "stream_tokens_per_s": summary,
            "recall": summary, "histograms": {}, "slo": []
        }))
        .unwrap()
    }

    /// A run that started at unix 10 s.
    fn report(elapsed_s: f64) -> StressReport {
        serde_json::from_value(serde_json::json!({
            "schema": "inferscope.stress.report", "version": 1, "scenario": "t", "target": "http://x",
            "started_unix_ns": 10_000_000_000u64, "started_monotonic_ns": 1, "elapsed_s": elapsed_s,
            "stopped": null, "slo_pass": true, "phases": [], "events": [], "records": []
        }))
        .unwrap()
    }

    pub(in crate::collect::load) fn record(
        id: u64,
        phase: u32,
        intended_ms: u64,
        ttft_ms: u64,
        tokens: u32,
    ) -> RequestRecord {
        let mut r = RequestRecord::new(id, phase, Endpoint::Chat, intended_ms * 1000);
        r.actual_us = r.intended_us + 500;
        r.token_us = (0..u64::from(tokens))
            .map(|i| r.intended_us + (ttft_ms + i * 10) * 1000)
            .collect();
        r.end_us = *r.token_us.last().unwrap();
        r.output_tokens = Some(tokens);
        r
    }

    #[test]
    fn records_land_in_the_windows_they_started_in_with_their_phase() {
        let mut report = report(3.0);
        report.phases = vec![phase("baseline", 2.0), phase("peak", 4.0)];
        report.records = vec![
            record(0, 0, 100, 50, 3),
            record(1, 0, 600, 70, 3),
            record(2, 1, 1200, 300, 2),
            record(3, 1, 1400, 500, 2),
        ];
        // The collectors started 2 s before the first request: those windows are dropped.
        let mut t = Timeline::new(8_000, 1000);
        t.at(8_500);
        fold_records(
            &mut t,
            &report,
            &LoadFold::of_records(1000, &report.records),
            &ServerSide::default(),
        );
        let starts: Vec<u64> = t.windows.iter().map(|w| w.start_unix_ms).collect();
        assert_eq!(starts[0], 10_000, "{starts:?} origin {}", t.origin_unix_ms);
        let (w0, w1) = (&t.windows[0], &t.windows[1]);
        assert_eq!(
            (w0.phase.as_deref(), w1.phase.as_deref()),
            (Some("baseline"), Some("peak"))
        );
        let l0 = w0.load.as_ref().unwrap();
        assert_eq!((l0.requests, l0.target_rps), (2, Some(2.0)));
        assert!((l0.ttft_ms.unwrap().p50 - 60.0).abs() < 1e-9);
        assert!((l0.itl_ms.unwrap().max - 10.0).abs() < 1e-9);
        let l1 = w1.load.as_ref().unwrap();
        assert_eq!((l1.requests, l1.in_flight_max), (2, 2));
        assert!((l1.output_tokens_per_s - 4.0).abs() < 1e-9);
    }

    /// Three phases of 2 s at 4 req/s (the run started at unix 10 s); the peak's generator
    /// sent its first `peak_sent` arrivals and no more: it was starved, or stopped.
    fn starved_peak(peak_sent: u64) -> (Timeline, crate::attribute::Attribution) {
        let mut report = report(6.0);
        let counted = |name: &str, finished: u64| {
            let mut p = phase(name, 4.0);
            (p.counts.scheduled, p.counts.finished) = (8, finished);
            p.counts.dropped = 8 - finished;
            p
        };
        report.phases = vec![
            counted("baseline", 8),
            counted("peak", peak_sent),
            counted("cooldown", 8),
        ];
        report.records = (0..8)
            .map(|i| record(i, 0, i * 250, 50, 3))
            .chain((0..peak_sent).map(|i| record(100 + i, 1, 2000 + i * 250, 50, 3)))
            .chain((0..8).map(|i| record(8 + i, 2, 4000 + i * 250, 50, 3)))
            .collect();
        let mut t = Timeline::new(10_000, 1000);
        t.at(15_999);
        fold_records(
            &mut t,
            &report,
            &LoadFold::of_records(1000, &report.records),
            &ServerSide::default(),
        );
        let a = crate::attribute::attribute(&t);
        (t, a)
    }

    /// A generator starved through a whole phase sent none of its arrivals: the phase has no
    /// record, and its windows went to the phase before. They are its own, carry what it never
    /// sent, and read `loadgen`.
    #[test]
    fn a_phase_that_sent_nothing_is_in_the_report_as_loadgen() {
        let (t, a) = starved_peak(0);
        let phases: Vec<Option<&str>> = t.windows.iter().map(|w| w.phase.as_deref()).collect();
        assert_eq!(
            phases,
            [
                "baseline", "baseline", "peak", "peak", "cooldown", "cooldown"
            ]
            .map(Some)
        );
        let peak = a.phase("peak").expect("the starved phase is reported");
        assert_eq!(peak.load.unsent, 8);
        assert_eq!(peak.dominant, Cause::Loadgen, "{:#?}", peak.shares);
        assert_eq!(a.phase("cooldown").unwrap().dominant, Cause::None);
    }

    /// Stopped after its first sends (SIGSTOP, a frozen cgroup): the windows it never sent in
    /// are the phase's, not its drain, and carry what each fell short by (the first window sent
    /// 2 of its 4, the second none).
    #[test]
    fn a_phase_stopped_after_its_first_sends_is_loadgen_not_a_drain() {
        let (t, a) = starved_peak(2);
        let unsent: Vec<Option<u64>> = t
            .windows
            .iter()
            .map(|w| w.load.as_ref().and_then(|l| l.unsent))
            .collect();
        assert_eq!(unsent, [None, None, Some(2), Some(4), None, None]);
        let names: Vec<&str> = a.phases.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["baseline", "peak", "cooldown"]);
        let peak = a.phase("peak").unwrap();
        assert_eq!(peak.load.unsent, 6);
        assert_eq!(peak.dominant, Cause::Loadgen, "{:#?}", peak.shares);
    }

    #[test]
    fn a_request_after_the_collectors_last_window_joins_it() {
        let mut report = report(2.003);
        report.phases = vec![phase("baseline", 2.0)];
        report.records = vec![record(0, 0, 100, 50, 3), record(1, 0, 2_003, 50, 3)];
        let mut t = Timeline::new(10_000, 1000);
        t.at(11_500);
        fold_records(
            &mut t,
            &report,
            &LoadFold::of_records(1000, &report.records),
            &ServerSide::default(),
        );
        assert_eq!(t.windows.len(), 2, "no window past the collectors' last");
        assert_eq!(t.windows[1].load.as_ref().unwrap().requests, 1);
    }
}

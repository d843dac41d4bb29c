//! A run's requests, folded as they finished ([`LoadFold`]), set into the time line's windows
//! (by intended start) with each window's phase, and joined with the kernel's view of the
//! server.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::{
    join::{Exchanges, Joined, Retransmits},
    load_fold::{Acc, LoadFold},
    session::ServerSide,
    stats::median,
    timeline::{LoadSignals, Mark, RequestParts, Timeline},
};
use crate::measure::{RequestRecord, StressReport};

/// Unix ms of a record time (µs since the run's start).
fn unix_ms(report: &StressReport, us: u64) -> u64 {
    report.started_unix_ns / 1_000_000 + us / 1000
}

/// What a window's sampled requests give once joined with the kernel's view.
#[derive(Default)]
struct Joins {
    transit: Vec<f64>,
    read_delay: Vec<f64>,
    /// E2E of joined requests loss hit (a retransmit, a stall: [`stalled`]), and of the
    /// other joined ones.
    loss_hit_e2e: Vec<f64>,
    clean_e2e: Vec<f64>,
    /// The window's successful requests cut into parts.
    parts: Vec<RequestParts>,
    /// LLM requests with a prompt key, and those of them that duplicated a prefill.
    keyed: u64,
    duplicates: u64,
    /// The share of them chance gives a twin (`Duplicates::chance`).
    chance: f64,
}

impl Joins {
    /// The share of the window's keyed (LLM) requests that duplicated a prefill.
    fn duplicate_share(&self) -> Option<f64> {
        (self.keyed > 0).then(|| self.duplicates as f64 / self.keyed as f64)
    }
}

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

/// The sampled requests joined with the server's exchanges and cut into parts, by window.
fn join_sample(
    timeline: &mut Timeline,
    report: &StressReport,
    sample: &[RequestRecord],
    server: &ServerSide,
    mut window_of: impl FnMut(&mut Timeline, u64) -> usize,
) -> BTreeMap<usize, Joins> {
    let exchanges = Exchanges::new(&server.exchanges, report);
    let retransmits = Retransmits::new(&server.retransmits, report);
    let duplicates = duplicate_prefills(sample.iter().filter_map(Sent::of));
    let mut out: BTreeMap<usize, Joins> = BTreeMap::new();
    for r in sample {
        let i = window_of(timeline, unix_ms(report, r.intended_us));
        let j = out.entry(i).or_default();
        if r.prompt_key.is_some() {
            j.keyed += 1;
            j.duplicates += u64::from(duplicates.ids.contains(&r.id));
        }
        let joined = exchanges.find(r);
        let cut = parts(r, joined.as_ref(), &exchanges);
        if let Some(x) = joined {
            j.transit.extend(x.transit_ms());
            j.read_delay.push(x.read_delay_ms());
            let e2e = r.e2e_us() as f64 / 1000.0;
            let srtt_us = timeline
                .windows
                .get(i)
                .and_then(|w| w.net.as_ref()?.srtt_mean_us);
            if retransmits.hit(r) || stalled(&cut, srtt_us) {
                j.loss_hit_e2e.push(e2e);
            } else {
                j.clean_e2e.push(e2e);
            }
        }
        if !r.counts_as_error() {
            j.parts.push(cut);
        }
    }
    // Chance at the window's own rate of the requests read (a thinned sample has fewer twins
    // to find, and fewer by chance alike).
    let len_s = timeline.len_ms.max(1) as f64 / 1000.0;
    for j in out.values_mut() {
        j.chance = duplicates.chance(j.keyed as f64 / len_s);
    }
    out
}

/// The requests sent within one prefill of an identical one (same `prompt_key`): a prefix
/// cache holds a prompt's blocks only once its prefill is done, so each of these computed the
/// same prefill again.
///
/// One prefill is the run's fastest send -> first token (its end, where no request streamed):
/// the time a first token takes when nothing waits. Never a prompt's own first token under
/// load, which holds the time it waited for admission: past a server's capacity every request
/// waits seconds, and a finite dataset repeats within seconds by chance (2,000 prompts at 80
/// req/s on the H200 read as a stampede). A prompt whose prefill is longer than the fastest
/// one's is undercounted, never a queue overcounted. Copies of a stampede are sent within
/// microseconds of each other.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Duplicates {
    /// The ids of the copies.
    pub ids: HashSet<u64>,
    /// One prefill, µs.
    pub prefill_us: u64,
    /// Distinct prompts among the requests read.
    pub distinct: usize,
}

impl Duplicates {
    /// The share of requests that chance alone gives a twin sent within one prefill before
    /// them, at `rate_per_s` LLM requests per second, each prompt drawn uniformly from the
    /// [`Self::distinct`] ones: `1 - exp(-rate x prefill / distinct)`. A generator that
    /// walks its dataset in order repeats less often than this; one fixed prompt repeats
    /// every request.
    #[must_use]
    pub fn chance(&self, rate_per_s: f64) -> f64 {
        if self.distinct == 0 || rate_per_s <= 0.0 {
            return 0.0;
        }
        let prefill_s = self.prefill_us as f64 / 1e6;
        1.0 - (-rate_per_s * prefill_s / self.distinct as f64).exp()
    }
}

/// See [`Duplicates`].
#[must_use]
pub fn duplicate_prefills(sent: impl IntoIterator<Item = Sent>) -> Duplicates {
    let mut by_key: HashMap<u64, Vec<Sent>> = HashMap::new();
    for s in sent {
        by_key.entry(s.key).or_default().push(s);
    }
    let all = || by_key.values().flatten();
    let streamed = all().filter(|s| s.streamed).map(|s| s.prefill_us).min();
    let prefill = streamed
        .or_else(|| all().map(|s| s.prefill_us).min())
        .unwrap_or(0);
    let mut out = Duplicates {
        ids: HashSet::new(),
        prefill_us: prefill,
        distinct: by_key.len(),
    };
    for mut twins in by_key.into_values().filter(|v| v.len() > 1) {
        twins.sort_unstable_by_key(|s| (s.at_us, s.prefill_us, s.id));
        for pair in twins.windows(2) {
            if pair[1].at_us < pair[0].at_us + prefill {
                out.ids.insert(pair[1].id);
            }
        }
    }
    out
}

/// An LLM request as `duplicate_prefills` reads it: its prompt, when it was sent, and how
/// long it took from there to its first token (to its end, without tokens).
#[derive(Debug, Clone, Copy)]
pub struct Sent {
    id: u64,
    key: u64,
    at_us: u64,
    prefill_us: u64,
    /// Whether it streamed a token (its `prefill_us` ends at a first token).
    streamed: bool,
}

impl Sent {
    /// `None` for a request without a `prompt_key` (not an LLM request).
    #[must_use]
    pub fn of(r: &RequestRecord) -> Option<Self> {
        let first = r.token_us.first().copied().unwrap_or(r.end_us);
        Some(Self {
            id: r.id,
            key: r.prompt_key?,
            at_us: r.actual_us,
            prefill_us: first.saturating_sub(r.actual_us),
            streamed: !r.token_us.is_empty(),
        })
    }
}

/// Sets every window's phase without one: the phase of the latest request that started
/// before it ended, so the tail of a phase (requests still running) stays with it.
fn label_phases(timeline: &mut Timeline, report: &StressReport, accs: &BTreeMap<usize, Acc>) {
    let mut current = None;
    let mut next = accs.iter().peekable();
    for (i, w) in timeline.windows.iter_mut().enumerate() {
        while let Some((_, a)) = next.next_if(|(j, _)| **j <= i) {
            current = Some(a.latest.1);
        }
        if w.phase.is_none()
            && let Some(p) = current
        {
            w.phase = report.phases.get(p as usize).map(|p| p.name.clone());
        }
    }
}

/// Arrivals a phase's schedule asked for and the generator never sent (it fell behind past the
/// phase's end, or was stopped) belong to the windows of the phase's planned span where its
/// sends fell short. Those windows are the phase's own whatever the records say (phases start
/// one after another at their planned ends; a window with none of its records went to the
/// phase before, and one after its last send would read as its drain), and each carries its
/// part of what was never sent, in proportion to its shortfall (the intended rate times its
/// time in the span, less what it sent), so that a phase starved whole or in part is in the
/// report and judged (`loadgen`) instead of vanishing into the phase before or its drain. Only
/// windows the collectors closed: a run whose first phase sent nothing has no window before
/// its first request.
fn spread_unsent(timeline: &mut Timeline, report: &StressReport) {
    let mut start_s = 0.0;
    for (k, p) in report.phases.iter().enumerate() {
        let (from_s, to_s) = (start_s, start_s + p.elapsed_s.max(0.0));
        start_s += p.duration_s;
        let unsent = p.counts.scheduled.saturating_sub(p.counts.finished);
        if unsent == 0 || to_s <= from_s {
            continue;
        }
        let at = |s: f64| unix_ms(report, (s * 1e6) as u64);
        let (from, to) = (at(from_s), at(to_s));
        let earlier = |name: &str| report.phases[..k].iter().any(|q| q.name == name);
        let mut short: Vec<(usize, f64)> = Vec::new();
        for (i, w) in timeline.windows.iter_mut().enumerate() {
            let (w_from, w_to) = (w.start_unix_ms, w.start_unix_ms + w.len_ms);
            if w_from < from || w_from >= to {
                continue;
            }
            match w.phase.as_deref() {
                Some(name) if name == p.name => {}
                Some(name) if !earlier(name) => continue,
                _ => w.phase = Some(p.name.clone()),
            }
            let in_span_s = (w_to.min(to) - w_from) as f64 / 1000.0;
            let sent = w.load.as_ref().map_or(0, |l| l.requests) as f64;
            let intended = p.target_rate.map_or(1.0, |r| r * in_span_s);
            short.push((i, (intended - sent).max(0.0)));
        }
        let total: f64 = short.iter().map(|(_, s)| s).sum();
        if total <= 0.0 {
            continue;
        }
        // Whole arrivals by their running sum, so that the parts add up to `unsent`.
        let (mut acc, mut given) = (0.0, 0);
        for (i, s) in short {
            acc += s;
            let upto = ((acc / total) * unsent as f64).round() as u64;
            let n = upto - given;
            given = upto;
            if n == 0 {
                continue;
            }
            let load = timeline.windows[i]
                .load
                .get_or_insert_with(LoadSignals::default);
            load.target_rps = p.target_rate;
            load.unsent = Some(n);
        }
    }
}

/// Marks the scenario's events on the time line.
fn mark_events(timeline: &mut Timeline, report: &StressReport) {
    timeline.marks = report
        .events
        .iter()
        .map(|e| Mark {
            unix_ms: unix_ms(report, e.at_us),
            phase: report.phases.get(e.phase as usize).map(|p| p.name.clone()),
            what: format!("{} -> {}", e.request, e.outcome),
        })
        .collect();
    timeline.marks.sort_by_key(|m| m.unix_ms);
}

/// Marks of `phase` sent before `end_unix_ms`.
fn timeline_marks_before(marks: &[Mark], phase: Option<&str>, end_unix_ms: u64) -> u64 {
    marks
        .iter()
        .filter(|m| m.phase.as_deref() == phase && m.unix_ms < end_unix_ms)
        .count() as u64
}

/// `r` cut into parts: its latencies and send lag, and its path as the kernel saw it when
/// `joined` with the server's exchange.
/// How long past 4 smoothed RTTs an answer's last bytes may take from the server's write to
/// the client's read before a lost segment is what held them. Linux recovers a lost segment
/// with one in flight (a token stream's usual state) by a retransmission timeout or a tail-loss
/// probe, each about 200 ms; a probe that sends new data instead of the lost segment, as it
/// does when the application wrote more (a lost ACK, then Nagle holding the next token), is no
/// retransmit to the kernel's tracepoint. 100 ms is above Nagle's hold for a delayed ACK
/// (40 ms), which the `transit stall` rule names from the first token.
const STALL_MS: f64 = 100.0;

/// Whether the kernel saw `cut`'s answer stall in transit: its last bytes took
/// [`STALL_MS`] + 4 RTTs (the window's mean smoothed RTT, µs) from write to read.
fn stalled(cut: &RequestParts, srtt_us: Option<f64>) -> bool {
    cut.kernel
        .as_ref()
        .is_some_and(|k| k.to_client_last_ms >= STALL_MS + 4.0 * srtt_us.unwrap_or(0.0) / 1000.0)
}

fn parts(r: &RequestRecord, joined: Option<&Joined<'_>>, joins: &Exchanges<'_>) -> RequestParts {
    let ms = |us: u64| us as f64 / 1000.0;
    let ttft = r.ttft_us();
    RequestParts {
        ttft_ms: ttft.map(ms),
        e2e_ms: ms(r.e2e_us()),
        send_lag_ms: ms(r.send_lag_us()),
        kernel: joined.map(|j| {
            let first_us = ttft.map_or(r.end_us, |t| r.intended_us + t);
            j.parts(joins.ns(first_us), joins.ns(r.end_us))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribute::Cause;
    use crate::measure::{Endpoint, PhaseReport};

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

    fn record(id: u64, phase: u32, intended_ms: u64, ttft_ms: u64, tokens: u32) -> RequestRecord {
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
    fn a_copy_sent_within_one_prefill_of_its_twin_duplicates_it() {
        let keyed = |id, at_ms, ttft_ms, key| {
            let mut r = record(id, 0, at_ms, ttft_ms, 3);
            r.prompt_key = Some(key);
            r
        };
        let records = [
            // A burst of three at 0 ms whose first tokens come at 100 ms, and the same prompt
            // alone at 150 ms, answered in 40 ms (one prefill): two duplicates.
            keyed(1, 0, 100, 7),
            keyed(2, 0, 100, 7),
            keyed(3, 0, 100, 7),
            keyed(4, 150, 40, 7),
            // Another prompt, at the same time: not one.
            keyed(5, 0, 100, 8),
            // No key (not an LLM request): never one.
            record(6, 0, 0, 100, 3),
        ];
        let dup = duplicate_prefills(records.iter().filter_map(Sent::of)).ids;
        assert_eq!(dup.len(), 2, "{dup:?}");
        assert!(!dup.contains(&4) && !dup.contains(&5) && !dup.contains(&6));
    }

    #[test]
    fn one_prompt_queued_at_a_steady_rate_is_no_duplicate() {
        // A fixed prompt every 125 ms on a server with two slots: each waits up to 400 ms
        // for its first token behind the others, but one prefill alone takes 20 ms and no two
        // were sent within it.
        let records: Vec<RequestRecord> = (0..10u64)
            .map(|i| {
                let mut r = record(i, 0, i * 125, if i == 0 { 20 } else { 400 }, 3);
                r.prompt_key = Some(7);
                r
            })
            .collect();
        assert!(
            duplicate_prefills(records.iter().filter_map(Sent::of))
                .ids
                .is_empty()
        );
    }

    /// The H200's overload without metrics: 2,000 prompts drawn at random at 80 req/s for 30 s,
    /// every first token 20-50 s away (waiting for admission), the run's fastest 117 ms. With
    /// the client's TTFT as the window 63% read as copies; within one prefill, the share is what
    /// chance gives, and nothing beyond it.
    #[test]
    fn a_finite_dataset_past_capacity_repeats_only_by_chance() {
        let mut seed: u64 = 7;
        let mut next = || {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            seed >> 33
        };
        let n = 2400u64;
        let records: Vec<RequestRecord> = (0..n)
            .map(|i| {
                let ttft = if i == 0 {
                    117
                } else {
                    20_000 + next() % 30_000
                };
                let mut r = record(i, 0, i * 1000 / 80, ttft, 3);
                r.prompt_key = Some(next() % 2000);
                r
            })
            .collect();
        let d = duplicate_prefills(records.iter().filter_map(Sent::of));
        assert_eq!(d.prefill_us, 116_500);
        let share = d.ids.len() as f64 / n as f64;
        let chance = d.chance(80.0);
        assert!(share < 0.02, "{share}");
        assert!(
            (share - chance).abs() < 0.01,
            "{share} against chance {chance}"
        );
    }

    /// One fixed prompt at a steady rate: every request has a twin by chance (the chance is ~1),
    /// so the copies beyond chance are none, whatever the window.
    #[test]
    fn one_fixed_prompt_is_all_chance() {
        let records: Vec<RequestRecord> = (0..50u64)
            .map(|i| {
                let mut r = record(i, 0, i * 10, 200, 3);
                r.prompt_key = Some(7);
                r
            })
            .collect();
        let d = duplicate_prefills(records.iter().filter_map(Sent::of));
        assert_eq!(d.distinct, 1);
        let share = d.ids.len() as f64 / 50.0;
        assert!(share > 0.9, "{share}");
        assert!(d.chance(100.0) > 0.99, "{}", d.chance(100.0));
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
    fn an_answer_held_in_transit_past_a_recovery_timer_is_stalled() {
        let cut = |to_client_last_ms: f64| RequestParts {
            ttft_ms: Some(10.0),
            e2e_ms: 300.0,
            send_lag_ms: 0.0,
            kernel: Some(super::super::timeline::KernelParts {
                to_server_ms: 0.1,
                server_first_ms: 5.0,
                to_client_first_ms: 0.1,
                server_last_ms: 100.0,
                to_client_last_ms,
            }),
        };
        // A tail-loss probe's 200 ms on a path of 50 µs RTT.
        assert!(stalled(&cut(200.0), Some(50.0)));
        // Nagle holding the last token for a delayed ACK, and a healthy path.
        assert!(!stalled(&cut(40.0), Some(50.0)));
        assert!(!stalled(&cut(0.1), None));
        // 200 ms is 4 RTTs on a path of 50 ms: the answer was in flight, not held.
        assert!(!stalled(&cut(200.0), Some(50_000.0)));
        // Without the kernel's view of the request nothing is said.
        let unseen = RequestParts {
            kernel: None,
            ..cut(500.0)
        };
        assert!(!stalled(&unseen, None));
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

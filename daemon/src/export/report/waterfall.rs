//! Per-request waterfalls: where one sampled request's time went, from the client's intended
//! start to its last token, joined with kernel timings of the server side.

use serde::{Deserialize, Serialize};

use crate::{
    collect::{join::Exchanges, kernel::Exchange, timeline::Timeline},
    loadgen::StressReport,
    measure::record::RequestRecord,
};

/// Why a request's waterfall was kept.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Sample {
    /// One of the requests taken evenly over the run.
    #[default]
    Uniform,
    /// One of its phase's slowest requests by E2E (intended start to the last byte).
    SlowestE2e,
    /// One of its phase's slowest requests by TTFT (intended start to the first token).
    SlowestTtft,
}

/// One sampled request. Every `*_ms` field is an offset from `intended_start_unix_ms`, so a
/// waterfall reads left to right without clock arithmetic; kernel fields are `None` when the
/// probes were off or the request could not be joined by its connection.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Waterfall {
    /// The load generator's request id.
    pub request_id: u64,
    /// Phase the request started in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Why it was kept: the slow tail of its phase, or the uniform sample.
    #[serde(default)]
    pub sample: Sample,
    /// When the schedule wanted the request sent, Unix ms (fractional).
    pub intended_start_unix_ms: f64,
    /// Client wrote the request (send lag = this).
    pub sent_ms: f64,
    /// Server socket received the request (kernel).
    #[serde(default)]
    pub server_received_ms: Option<f64>,
    /// Server wrote its first response bytes (kernel).
    #[serde(default)]
    pub server_first_byte_ms: Option<f64>,
    /// Server wrote its first token (kernel: second write of the stream).
    #[serde(default)]
    pub server_first_token_ms: Option<f64>,
    /// Client read the first token (TTFT).
    #[serde(default)]
    pub client_first_token_ms: Option<f64>,
    /// Client read each further token.
    #[serde(default)]
    pub token_ms: Vec<f64>,
    /// Server wrote the last bytes of its response (kernel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_last_byte_ms: Option<f64>,
    /// Client read the end of the response.
    pub end_ms: f64,
    /// Run-queue delay of the server's threads inside [sent, end], ms: a share of its windows'
    /// totals (each window's total times the part of it the request covers), not the delay of
    /// the threads that served this request.
    #[serde(default)]
    pub runq_delay_ms: Option<f64>,
    /// Host time the server blocked in GPU synchronisation inside [sent, end], ms: a share of
    /// its windows' totals, as `runq_delay_ms`.
    #[serde(default)]
    pub gpu_sync_ms: Option<f64>,
    /// Why the request failed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Waterfall {
    /// Time to first token as the client saw it, from the intended start.
    #[must_use]
    pub fn ttft_ms(&self) -> Option<f64> {
        self.client_first_token_ms
    }

    /// Client TTFT minus the server's first-token write: the network's share of the first token.
    #[must_use]
    pub fn network_ms(&self) -> Option<f64> {
        Some(self.client_first_token_ms? - self.server_first_token_ms?)
    }

    /// Offsets that go backwards make a waterfall meaningless: the first out-of-order stage, if
    /// any (stages that are absent are skipped).
    #[must_use]
    pub fn out_of_order(&self) -> Option<&'static str> {
        let stages = [
            ("sent", Some(self.sent_ms)),
            ("server_received", self.server_received_ms),
            ("server_first_byte", self.server_first_byte_ms),
            ("server_first_token", self.server_first_token_ms),
            ("client_first_token", self.client_first_token_ms),
            ("end", Some(self.end_ms)),
        ];
        let mut last = 0.0;
        for (name, at) in stages {
            if let Some(t) = at {
                if t < last {
                    return Some(name);
                }
                last = t;
            }
        }
        None
    }
}

/// Most waterfalls of the uniform sample kept in a report (evenly spread over the run).
pub const SAMPLES: usize = 200;

/// Slowest requests of each phase kept by E2E and again by TTFT, besides the uniform sample.
pub const SLOWEST: usize = 5;

/// Builds the waterfalls: each phase's [`SLOWEST`] requests by E2E and by TTFT first (the slow
/// tail a uniform sample rarely holds), then up to [`SAMPLES`] evenly spread over the run's
/// records. Run-queue delay and GPU sync time inside a request are prorated from its windows
/// (the kernel aggregates them per window), so they are estimates; the kernel timestamps of the
/// exchange are exact.
#[must_use]
pub fn build(report: &StressReport, exchanges: &[Exchange], timeline: &Timeline) -> Vec<Waterfall> {
    let start_unix_ms = report.started_unix_ns as f64 / 1e6;
    let joins = Exchanges::new(exchanges, report);
    picks(&report.records)
        .into_iter()
        .map(|(i, sample)| {
            let r = &report.records[i];
            let intended_ns = joins.ns(r.intended_us);
            let joined = joins.find(r);
            let ex = joined.map(|j| j.exchange);
            let rel = |ns: u64| (ns as f64 - intended_ns as f64) / 1e6;
            let rel_us = |us: u64| (us as f64 - r.intended_us as f64) / 1000.0;
            let intended_unix = start_unix_ms + r.intended_us as f64 / 1000.0;
            let (runq, sync) = prorate(
                timeline,
                start_unix_ms + r.actual_us as f64 / 1000.0,
                start_unix_ms + r.end_us as f64 / 1000.0,
            );
            Waterfall {
                request_id: r.id,
                phase: report.phases.get(r.phase as usize).map(|p| p.name.clone()),
                sample,
                intended_start_unix_ms: intended_unix,
                sent_ms: rel_us(r.actual_us),
                server_received_ms: ex.map(|e| rel(e.req_in_ns)),
                server_first_byte_ms: ex.map(|e| rel(e.first_out_ns)),
                server_first_token_ms: joined.map(|j| rel(j.server_first_token_ns())),
                client_first_token_ms: r.token_us.first().map(|&t| rel_us(t)),
                token_ms: r.token_us.iter().skip(1).map(|&t| rel_us(t)).collect(),
                server_last_byte_ms: ex.map(|e| rel(e.last_out_ns)),
                end_ms: rel_us(r.end_us),
                runq_delay_ms: runq,
                gpu_sync_ms: sync,
                error: r.error.map(|e| format!("{e:?}")),
            }
        })
        .collect()
}

/// The records to draw, each once, with why: the slow tail of every phase (by E2E, then by
/// TTFT, slowest first), then the uniform sample.
fn picks(records: &[RequestRecord]) -> Vec<(usize, Sample)> {
    type Key = fn(&RequestRecord) -> Option<u64>;
    let tails: [(Sample, Key); 2] = [
        (Sample::SlowestE2e, |r| {
            Some(r.end_us.saturating_sub(r.intended_us))
        }),
        (Sample::SlowestTtft, |r| {
            Some(r.token_us.first()?.saturating_sub(r.intended_us))
        }),
    ];
    let phases: std::collections::BTreeSet<u32> = records.iter().map(|r| r.phase).collect();
    let mut taken = std::collections::HashSet::new();
    let mut out = Vec::new();
    for phase in phases {
        for (sample, key) in tails {
            let mut slow: Vec<(u64, usize)> = records
                .iter()
                .enumerate()
                .filter(|(_, r)| r.phase == phase)
                .filter_map(|(i, r)| Some((key(r)?, i)))
                .collect();
            slow.sort_unstable_by(|a, b| b.cmp(a));
            let fresh = slow.into_iter().filter(|&(_, i)| !taken.contains(&i));
            for (_, i) in fresh.take(SLOWEST).collect::<Vec<_>>() {
                taken.insert(i);
                out.push((i, sample));
            }
        }
    }
    let step = (records.len() / SAMPLES).max(1);
    for i in (0..records.len()).step_by(step).take(SAMPLES) {
        if taken.insert(i) {
            out.push((i, Sample::Uniform));
        }
    }
    out
}

/// Run-queue wait and GPU sync time of the windows overlapping `[from, to]` (Unix ms),
/// each weighted by the share of the window the interval covers.
fn prorate(t: &Timeline, from: f64, to: f64) -> (Option<f64>, Option<f64>) {
    let (mut runq, mut sync, mut any_runq, mut any_sync) = (0.0, 0.0, false, false);
    for w in &t.windows {
        let (ws, we) = (w.start_unix_ms as f64, (w.start_unix_ms + w.len_ms) as f64);
        let overlap = (to.min(we) - from.max(ws)).max(0.0);
        if overlap <= 0.0 {
            continue;
        }
        let share = overlap / w.len_ms as f64;
        if let Some(r) = &w.runq {
            runq += r.total_ms * share;
            any_runq = true;
        }
        if let Some(g) = &w.gpu {
            sync += g.sync_ms * share;
            any_sync = true;
        }
    }
    (any_runq.then_some(runq), any_sync.then_some(sync))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::record::Endpoint;

    fn record(id: u64, phase: u32, ttft_ms: u64, e2e_ms: u64) -> RequestRecord {
        let mut r = RequestRecord::new(id, phase, Endpoint::Chat, id * 1000);
        r.actual_us = id * 1000;
        r.token_us = vec![id * 1000 + ttft_ms * 1000];
        r.end_us = id * 1000 + e2e_ms * 1000;
        r
    }

    #[test]
    fn the_slow_tail_of_each_phase_comes_first_and_is_marked() {
        // 1,000 requests in two phases of 500, TTFT 10 ms and E2E 100 ms but: request 301 (TTFT
        // 500, E2E 600), 701 (E2E 900), 801 (TTFT 400, E2E 450). The uniform sample is every
        // fifth request.
        let records: Vec<RequestRecord> = (0..1000)
            .map(|i| {
                let (ttft, e2e) = match i {
                    301 => (500, 600),
                    701 => (10, 900),
                    801 => (400, 450),
                    _ => (10, 100),
                };
                record(i, u32::from(i >= 500), ttft, e2e)
            })
            .collect();
        let ids: Vec<(u64, Sample)> = picks(&records)
            .iter()
            .map(|&(i, s)| (records[i].id, s))
            .collect();
        assert_eq!(ids[0], (301, Sample::SlowestE2e), "{ids:?}");
        // Phase 1 by E2E: 701, then 801.
        let phase1 = ids.iter().position(|(id, _)| *id == 701).unwrap();
        assert_eq!(ids[phase1 + 1], (801, Sample::SlowestE2e), "{ids:?}");
        // Each phase: 5 by E2E, 5 more by TTFT; then the uniform sample, less what was taken.
        let tail = ids
            .iter()
            .take_while(|(_, s)| *s != Sample::Uniform)
            .count();
        assert_eq!(tail, 20, "{ids:?}");
        let taken: std::collections::HashSet<u64> = ids[..tail].iter().map(|(id, _)| *id).collect();
        let uniform: Vec<u64> = (0..1000)
            .step_by(5)
            .filter(|i| !taken.contains(i))
            .collect();
        let rest: Vec<u64> = ids[tail..].iter().map(|(id, _)| *id).collect();
        assert_eq!(rest, uniform);
        assert!(ids[tail..].iter().all(|(_, s)| *s == Sample::Uniform));
    }

    #[test]
    fn network_share_and_order() {
        let mut w = Waterfall {
            sent_ms: 0.2,
            server_received_ms: Some(0.4),
            server_first_byte_ms: Some(1.0),
            server_first_token_ms: Some(80.0),
            client_first_token_ms: Some(86.5),
            end_ms: 900.0,
            ..Waterfall::default()
        };
        assert_eq!(w.network_ms(), Some(6.5));
        assert_eq!(w.out_of_order(), None);
        w.server_received_ms = Some(0.1);
        assert_eq!(w.out_of_order(), Some("server_received"));
        w.server_first_token_ms = None;
        assert_eq!(w.network_ms(), None);
    }
}

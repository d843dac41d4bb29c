//! Per-phase aggregates: HDR histograms and counters, fed one record at a time (histograms
//! are kept and merged as `summary.rs` says).

use std::collections::BTreeMap;

use hdrhistogram::Histogram;

use super::{
    record::{ErrorClass, RequestRecord},
    slo::{Metric, Series, Stat},
    summary::{Summary, summarize},
};
use crate::quantile::{Quantile, new_hist};

/// Scale of the `stream_tokens_per_s` histogram: values are tokens/s x 1000.
pub const TOKS_SCALE: f64 = 1000.0;
/// Scale of the `recall` histogram: values are recall x 10000.
pub const RECALL_SCALE: f64 = 10_000.0;

/// Live aggregates of one phase.
#[derive(Debug, Clone)]
pub struct PhaseMetrics {
    /// Histograms, one per [`Hist`] (µs for latencies; see the scales for the others).
    hists: [Histogram<u64>; Hist::ALL.len()],
    /// Requests the schedule asked for (open loop) or started (closed loop).
    pub scheduled: u64,
    /// Requests dropped by a cap.
    pub dropped: u64,
    /// Requests finished (ok or failed).
    pub finished: u64,
    /// Requests that succeeded.
    pub ok: u64,
    /// Successes that met every per-request SLO.
    pub good: u64,
    /// Failures by class.
    pub errors: BTreeMap<ErrorClass, u64>,
    /// Failures that count toward the error rate.
    pub counted_errors: u64,
    /// Requests resent on a fresh connection (the server closed the kept-alive one).
    pub reconnected: u64,
    /// Finished first attempts a chaos knob shaped, by knob.
    pub chaos: BTreeMap<super::record::Chaos, u64>,
    /// Output tokens of all finished requests.
    pub output_tokens: u64,
    /// Prompt tokens reported by the server.
    pub input_tokens: u64,
    /// Tasks ended: single requests, and conversations that ran to their end or failed.
    pub tasks: u64,
    /// Tasks that succeeded (see `check.rs`).
    pub tasks_ok: u64,
    /// Outages and retries (see `resilience.rs`).
    pub resilience: super::resilience::Tracker,
    /// When the phase started, µs since the run's start.
    pub start_us: u64,
    /// Sampled vector queries: latency and recall together (`vector/health.rs`).
    pub vector: super::vector_health::Samples,
    /// Pipeline tasks: their steps, final chat TTFT and tool depth (`pipeline.rs`).
    pub pipeline: super::pipeline::Samples,
    /// Agentic sessions: their calls by depth, and each ended session (`session.rs`).
    pub sessions: super::session::Samples,
    /// Requests started during a closed-loop ramp-up, apart from the histograms above.
    pub ramp: RampSamples,
}

/// The requests a closed-loop phase started during its ramp-up (`RequestRecord::ramp_up`):
/// counted with the phase, but their latencies kept apart from its percentiles.
#[derive(Debug, Clone)]
pub struct RampSamples {
    /// Requests started during the ramp that finished.
    pub finished: u64,
    /// Their TTFT, µs.
    pub ttft: Histogram<u64>,
    /// Their E2E of those that succeeded, µs.
    pub e2e: Histogram<u64>,
}

impl Default for RampSamples {
    fn default() -> Self {
        Self {
            finished: 0,
            ttft: new_hist(),
            e2e: new_hist(),
        }
    }
}

impl RampSamples {
    fn observe(&mut self, r: &RequestRecord) {
        self.finished += 1;
        if r.error.is_none() {
            self.e2e.saturating_record(r.e2e_us().max(1));
        }
        if let Some(t) = r.ttft_us().filter(|_| r.error.is_none()) {
            self.ttft.saturating_record(t.max(1));
        }
    }

    /// TTFT and E2E summaries, ms.
    #[must_use]
    pub fn summaries(&self) -> (Summary, Summary) {
        (summarize(&self.ttft, 1000.0), summarize(&self.e2e, 1000.0))
    }
}

/// The per-phase histograms, in report order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hist {
    /// Time to first token.
    Ttft,
    /// TTFT of conversations' first turns.
    TtftFirstTurn,
    /// TTFT of conversations' later turns (their prompts start with the history).
    TtftLaterTurns,
    /// Gaps between tokens.
    Itl,
    /// Time per output token after the first.
    Tpot,
    /// From the intended send time to the end.
    E2e,
    /// From the actual send time to the end.
    E2eFromSend,
    /// How late requests were sent.
    SendLag,
    /// Tokens per second of each stream.
    StreamTokensPerS,
    /// Recall@k of vector queries.
    Recall,
    /// Information capacity efficiency of tasks.
    Ice,
    /// Time a request waited for its new connection to open (`RequestRecord::connect_us`).
    Connect,
}

impl Hist {
    /// Every histogram, in report order.
    pub const ALL: [Self; 12] = [
        Self::Ttft,
        Self::TtftFirstTurn,
        Self::TtftLaterTurns,
        Self::Itl,
        Self::Tpot,
        Self::E2e,
        Self::E2eFromSend,
        Self::SendLag,
        Self::StreamTokensPerS,
        Self::Recall,
        Self::Ice,
        Self::Connect,
    ];

    /// The name in reports.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Ttft => "ttft",
            Self::TtftFirstTurn => "ttft_first_turn",
            Self::TtftLaterTurns => "ttft_later_turns",
            Self::Itl => "itl",
            Self::Tpot => "tpot",
            Self::E2e => "e2e",
            Self::E2eFromSend => "e2e_from_send",
            Self::SendLag => "send_lag",
            Self::StreamTokensPerS => "stream_tokens_per_s",
            Self::Recall => "recall",
            Self::Ice => "ice",
            Self::Connect => "connect",
        }
    }

    /// A value already divided into display units, less the offset it was stored with. A recall
    /// is at most 1: HDR keeps 3 significant digits, so a recall of 1 can read back as 1.0009.
    fn unshift(self, v: f64) -> f64 {
        let v = v - self.units().1;
        if self == Self::Recall { v.min(1.0) } else { v }
    }

    /// The stored value's divisor and offset to display units (ms, tokens/s, fraction, nats).
    fn units(self) -> (f64, f64) {
        match self {
            Self::StreamTokensPerS => (TOKS_SCALE, 0.0),
            Self::Recall => (RECALL_SCALE, 1.0 / RECALL_SCALE),
            Self::Ice => (ICE_SCALE, 1.0 / ICE_SCALE),
            _ => (1000.0, 0.0),
        }
    }
}

impl std::ops::Index<Hist> for PhaseMetrics {
    type Output = Histogram<u64>;

    fn index(&self, h: Hist) -> &Histogram<u64> {
        &self.hists[h as usize]
    }
}

impl std::ops::IndexMut<Hist> for PhaseMetrics {
    fn index_mut(&mut self, h: Hist) -> &mut Histogram<u64> {
        &mut self.hists[h as usize]
    }
}

/// ICE values are stored x this (+1, so that 0 is kept).
pub const ICE_SCALE: f64 = 10_000.0;

impl Default for PhaseMetrics {
    fn default() -> Self {
        PhaseMetrics {
            hists: Hist::ALL.map(|_| new_hist()),
            scheduled: 0,
            dropped: 0,
            finished: 0,
            ok: 0,
            good: 0,
            errors: BTreeMap::new(),
            counted_errors: 0,
            reconnected: 0,
            chaos: BTreeMap::new(),
            output_tokens: 0,
            input_tokens: 0,
            tasks: 0,
            tasks_ok: 0,
            resilience: super::resilience::Tracker::default(),
            start_us: 0,
            vector: super::vector_health::Samples::default(),
            pipeline: super::pipeline::Samples::default(),
            sessions: super::session::Samples::default(),
            ramp: RampSamples::default(),
        }
    }
}

impl PhaseMetrics {
    fn add(&mut self, h: Hist, v: u64) {
        self[h].saturating_record(v.max(1));
    }

    /// [`Self::add`] unless `apart` (a ramp-up request's latency stays out of the phase's).
    fn add_unless(&mut self, apart: bool, h: Hist, v: u64) {
        if !apart {
            self.add(h, v);
        }
    }

    /// Adds one ended task (a conversation's, or a single request's from [`Self::record`]).
    pub fn task(&mut self, ok: bool, ice: Option<f64>) {
        self.tasks += 1;
        self.tasks_ok += u64::from(ok);
        if let Some(v) = ice {
            self.add(Hist::Ice, (v * ICE_SCALE).round() as u64 + 1);
        }
    }

    /// Adds one finished request.
    pub fn record(&mut self, r: &RequestRecord) {
        let outage = super::resilience::RetryOn::of(r).is_some();
        self.resilience.observe(outage, r.end_us);
        // A retry is counted apart: first attempts alone make latencies and error rates.
        if r.attempt.is_some_and(|a| a > 1) {
            self.resilience.retry(r.error.is_none(), r.end_us);
            return;
        }
        self.finished += 1;
        let apart = r.ramp_up;
        if apart {
            self.ramp.observe(r);
        }
        self.pipeline.observe(r);
        self.sessions.observe_call(r);
        if let Some(c) = r.chaos {
            *self.chaos.entry(c).or_default() += 1;
        }
        // A request outside a conversation and without retries is a task of its own (with
        // retries the engine reports the task after its last attempt).
        if r.turn.is_none() && r.attempt.is_none() {
            self.task(r.error.is_none() && r.check != Some(false), None);
        }
        if let Some(lag) = r.schedule_lag_us() {
            self.add_unless(apart, Hist::SendLag, lag);
        }
        if r.reconnected {
            self.reconnected += 1;
        }
        // Ramp-up requests too: opening the users' connections is what a ramp spreads out.
        if let Some(us) = r.connect_us {
            self.add(Hist::Connect, u64::from(us));
        }
        if let Some(class) = r.error {
            *self.errors.entry(class).or_default() += 1;
            if r.counts_as_error() {
                self.counted_errors += 1;
            }
        } else {
            self.ok += 1;
            self.add_unless(apart, Hist::E2e, r.e2e_us());
            if r.endpoint == super::record::Endpoint::VectorSearch {
                self.vector
                    .observe(r.end_us.saturating_sub(self.start_us), r.e2e_us());
            }
            self.add_unless(
                apart,
                Hist::E2eFromSend,
                r.end_us.saturating_sub(r.actual_us),
            );
        }
        if r.good {
            self.good += 1;
        }
        if r.error.is_none() || r.chaos.is_some() {
            if let Some(t) = r.ttft_us() {
                self.add_unless(apart, Hist::Ttft, t);
                // Conversations: the first turn against the later ones (whose prompts start
                // with the history a prefix cache may hold).
                match r.turn {
                    Some(1) => self.add_unless(apart, Hist::TtftFirstTurn, t),
                    Some(_) => self.add_unless(apart, Hist::TtftLaterTurns, t),
                    None => {}
                }
            }
            for gap in r.itl_us() {
                self.add_unless(apart, Hist::Itl, gap);
            }
            if let Some(tpot) = r.tpot_us() {
                self.add_unless(apart, Hist::Tpot, tpot.round() as u64);
                if tpot > 0.0 {
                    self.add_unless(
                        apart,
                        Hist::StreamTokensPerS,
                        (1e6 / tpot * TOKS_SCALE).round() as u64,
                    );
                }
            }
        }
        if let Some(recall) = r.recall {
            // Stored +1 so that a recall of 0 is kept (HDR values start at 1).
            self.add(Hist::Recall, (recall * RECALL_SCALE).round() as u64 + 1);
            self.vector.push(super::vector_health::Sample {
                at_us: r.end_us.saturating_sub(self.start_us),
                e2e_us: r.e2e_us(),
                recall,
            });
        }
        self.output_tokens += u64::from(r.output_tokens.unwrap_or(0));
        self.input_tokens += u64::from(r.input_tokens.unwrap_or(0));
    }

    /// Failed / finished, excluding intentional chaos aborts.
    #[must_use]
    pub fn error_rate(&self) -> f64 {
        if self.finished == 0 {
            0.0
        } else {
            self.counted_errors as f64 / self.finished as f64
        }
    }

    /// Summary of a histogram in display units (ms, tokens/s, recall fraction, ICE nats).
    #[must_use]
    pub fn summary(&self, h: Hist) -> Summary {
        let mut s = summarize(&self[h], h.units().0);
        if s.count > 0 {
            for v in [
                &mut s.mean,
                &mut s.p50,
                &mut s.p90,
                &mut s.p95,
                &mut s.p99,
                &mut s.p999,
                &mut s.max,
            ] {
                *v = h.unshift(*v);
            }
            for v in s.ci95.values_mut().flatten() {
                *v = h.unshift(*v);
            }
        }
        s
    }

    /// The samples behind a distribution's statistic (latencies, recall, stream rates,
    /// entropy); `None` for counts and rates.
    #[must_use]
    pub fn samples(&self, m: Metric) -> Option<u64> {
        let h = match m {
            Metric::Latency(series, _) => series.hist(),
            Metric::Recall(_) => Hist::Recall,
            Metric::StreamTokensPerS(_) => Hist::StreamTokensPerS,
            Metric::Ice(_) => Hist::Ice,
            _ => return None,
        };
        Some(self[h].len())
    }

    /// The value an SLO compares (ms, fraction, per second); `elapsed_s` is the phase length.
    #[must_use]
    pub fn value(&self, m: Metric, elapsed_s: f64) -> Option<f64> {
        let stat = |h: Hist, s: Stat| {
            let sum = self.summary(h);
            if sum.count == 0 {
                return None;
            }
            match s {
                Stat::Max => Some(sum.max),
                Stat::Mean => Some(sum.mean),
                Stat::Quantile(q) => self[h].quantile(q).map(|v| h.unshift(v / h.units().0)),
            }
        };
        let per_s = |n: u64| (elapsed_s > 0.0).then(|| n as f64 / elapsed_s);
        match m {
            Metric::Latency(series, s) => stat(series.hist(), s),
            Metric::ErrorRate => (self.finished > 0).then(|| self.error_rate()),
            Metric::DropRate => {
                (self.scheduled > 0).then(|| self.dropped as f64 / self.scheduled as f64)
            }
            Metric::GoodputRatio => {
                (self.finished > 0).then(|| self.good as f64 / self.finished as f64)
            }
            Metric::Recall(s) => stat(Hist::Recall, s),
            Metric::RecallDrift | Metric::RecallMinWindow => {
                let window = super::vector_health::window_for(elapsed_s);
                let h = self
                    .vector
                    .health(window, super::vector_health::REBUILD_BELOW)?;
                Some(if m == Metric::RecallDrift {
                    h.drift
                } else {
                    h.min_window_recall
                })
            }
            Metric::StreamTokensPerS(s) => stat(Hist::StreamTokensPerS, s),
            Metric::Rps => per_s(self.finished),
            Metric::OutputTokensPerS => per_s(self.output_tokens),
            Metric::TokensPerS => per_s(self.input_tokens + self.output_tokens),
            Metric::SemanticTasksPerS => per_s(self.tasks_ok),
            Metric::TaskSuccessRate => {
                (self.tasks > 0).then(|| self.tasks_ok as f64 / self.tasks as f64)
            }
            Metric::Ice(s) => stat(Hist::Ice, s),
        }
    }
}

impl Series {
    /// The histogram of the series.
    fn hist(self) -> Hist {
        match self {
            Series::Ttft => Hist::Ttft,
            Series::Itl => Hist::Itl,
            Series::Tpot => Hist::Tpot,
            Series::E2e => Hist::E2e,
            Series::SendLag => Hist::SendLag,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::{
        record::{Endpoint, RequestRecord},
        summary::{decode_hist, encode_hist},
    };

    #[test]
    fn histograms_roundtrip_and_merge_exactly() {
        let mut a = new_hist();
        let mut b = new_hist();
        for v in 1..=1000u64 {
            a.record(v).unwrap();
            b.record(v * 1000).unwrap();
        }
        let a2 = decode_hist(&encode_hist(&a)).unwrap();
        let b2 = decode_hist(&encode_hist(&b)).unwrap();
        assert_eq!(a2, a);
        let mut merged = a2.clone();
        merged.add(&b2).unwrap();
        let mut direct = a.clone();
        direct.add(&b).unwrap();
        assert_eq!(
            merged.value_at_quantile(0.99),
            direct.value_at_quantile(0.99)
        );
        assert_eq!(merged.len(), 2000);
        assert!(decode_hist("not base64!").is_err());
    }

    #[test]
    fn records_feed_the_right_series() {
        let mut m = PhaseMetrics::default();
        let mut r = RequestRecord::new(0, 0, Endpoint::Chat, 0);
        r.actual_us = 2_000;
        r.token_us = vec![50_000, 60_000, 70_000];
        r.end_us = 70_000;
        r.output_tokens = Some(3);
        m.record(&r);
        let mut bad = RequestRecord::new(1, 0, Endpoint::Chat, 0);
        bad.fail(ErrorClass::HttpStatus, "503");
        m.record(&bad);
        assert_eq!((m.finished, m.ok, m.counted_errors), (2, 1, 1));
        assert!((m.summary(Hist::Ttft).p50 - 50.0).abs() < 0.1);
        assert_eq!(m.summary(Hist::Itl).count, 2);
        assert!((m.summary(Hist::Tpot).p50 - 10.0).abs() < 0.1);
        assert!((m.summary(Hist::StreamTokensPerS).p50 - 100.0).abs() < 0.5);
        assert!((m.summary(Hist::SendLag).max - 2.0).abs() < 0.01);
        assert_eq!(m.value(Metric::ErrorRate, 1.0), Some(0.5));
        assert_eq!(m.value(Metric::Rps, 2.0), Some(1.0));
    }

    #[test]
    fn ramp_up_requests_count_but_stay_out_of_the_percentiles() {
        let mut m = PhaseMetrics::default();
        let rec = |ttft_us: u64, ramp_up: bool| {
            let mut r = RequestRecord::new(0, 0, Endpoint::Chat, 0);
            r.token_us = vec![ttft_us, ttft_us + 10_000];
            r.end_us = ttft_us + 10_000;
            r.output_tokens = Some(2);
            r.ramp_up = ramp_up;
            r
        };
        m.record(&rec(900_000, true));
        m.record(&rec(50_000, false));
        assert_eq!((m.finished, m.ok, m.output_tokens), (2, 2, 4));
        assert_eq!(m.summary(Hist::Ttft).count, 1);
        assert!((m.summary(Hist::Ttft).max - 50.0).abs() < 0.1);
        assert_eq!(m.summary(Hist::E2e).count, 1);
        assert_eq!(m.summary(Hist::Itl).count, 1);
        let (ttft, e2e) = m.ramp.summaries();
        assert_eq!((m.ramp.finished, ttft.count, e2e.count), (1, 1, 1));
        assert!((ttft.max - 900.0).abs() < 1.0, "{ttft:?}");
    }
}

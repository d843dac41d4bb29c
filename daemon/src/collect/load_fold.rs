//! Every finished request of a run folded into time-line windows as it finishes, in memory
//! that does not grow with the requests: counts, rates and latency sketches per window (by
//! intended start), requests in flight per millisecond, and a sample of the requests, thinned
//! evenly once it outgrows its budget, for what needs each one (kernel joins, the parts of a
//! request, duplicate prefills). The explanation of a run so never depends on the records the
//! load generator keeps for its report (`--no-records`, the records budget).

use std::collections::BTreeMap;

use tokio::{sync::mpsc, task::JoinHandle};

use crate::measure::{Endpoint, ErrorClass, RequestRecord};
use crate::quantile::Sketch;

/// Default bytes of sampled requests a fold keeps (about 200,000 requests) before it thins
/// them to every second one, then every fourth, ...
pub const SAMPLE_BUDGET: usize = 64 << 20;

/// Records queued for the fold.
const WATCH_QUEUE: usize = 4096;

/// One window's requests, folded.
#[derive(Debug, Default)]
pub struct Acc {
    pub requests: u64,
    pub errors: u64,
    pub ttft: Sketch,
    pub itl: Sketch,
    pub e2e: Sketch,
    pub lag: Sketch,
    pub tokens: u64,
    pub phases: BTreeMap<u32, u64>,
    pub endpoints: BTreeMap<Endpoint, u64>,
    pub error_classes: BTreeMap<ErrorClass, u64>,
    /// Sum and count of sampled recall@k.
    pub recall: (f64, u64),
    /// The latest intended start in the window (µs since the run's start) and its phase.
    pub latest: (u64, u32),
}

impl Acc {
    fn add(&mut self, r: &RequestRecord) {
        self.requests += 1;
        if let Some(class) = r.error.filter(|_| r.counts_as_error()) {
            self.errors += 1;
            *self.error_classes.entry(class).or_default() += 1;
        }
        *self.endpoints.entry(r.endpoint).or_default() += 1;
        if let Some(x) = r.recall {
            self.recall.0 += x;
            self.recall.1 += 1;
        }
        *self.phases.entry(r.phase).or_default() += 1;
        let ms = |us: u64| us as f64 / 1000.0;
        if let Some(t) = r.ttft_us() {
            self.ttft.add(ms(t));
        }
        r.itl_us().for_each(|t| self.itl.add(ms(t)));
        self.e2e.add(ms(r.e2e_us()));
        if let Some(l) = r.schedule_lag_us() {
            self.lag.add(ms(l));
        }
        self.tokens += u64::from(r.output_tokens.unwrap_or(0));
        self.latest = self.latest.max((r.intended_us, r.phase));
    }

    /// Counts what `other` counted too.
    pub fn merge(&mut self, other: &Acc) {
        self.requests += other.requests;
        self.errors += other.errors;
        self.ttft.merge(&other.ttft);
        self.itl.merge(&other.itl);
        self.e2e.merge(&other.e2e);
        self.lag.merge(&other.lag);
        self.tokens += other.tokens;
        for (k, n) in &other.phases {
            *self.phases.entry(*k).or_default() += n;
        }
        for (k, n) in &other.endpoints {
            *self.endpoints.entry(*k).or_default() += n;
        }
        for (k, n) in &other.error_classes {
            *self.error_classes.entry(*k).or_default() += n;
        }
        self.recall = (
            self.recall.0 + other.recall.0,
            self.recall.1 + other.recall.1,
        );
        self.latest = self.latest.max(other.latest);
    }

    /// Mean recall@k of the window's sampled queries.
    #[must_use]
    pub fn recall_mean(&self) -> Option<f64> {
        (self.recall.1 > 0).then(|| self.recall.0 / self.recall.1 as f64)
    }
}

/// A run's requests folded so far.
#[derive(Debug)]
pub struct LoadFold {
    /// Window length, ms (the time line's).
    len_ms: u64,
    /// Per window, by index from the run's start (`intended ms / len_ms`).
    windows: BTreeMap<u64, Acc>,
    /// Requests started minus requests ended, per ms since the run's start.
    in_flight: Vec<i32>,
    /// Every `stride`-th request by id, without its tokens past the first.
    sample: Vec<RequestRecord>,
    sample_bytes: usize,
    budget: usize,
    stride: u64,
    /// Requests folded.
    seen: u64,
    first_intended_us: Option<u64>,
}

impl LoadFold {
    /// An empty fold into windows of `len_ms` keeping `budget` bytes of sampled requests.
    #[must_use]
    pub fn new(len_ms: u64, budget: usize) -> Self {
        Self {
            len_ms: len_ms.max(1),
            windows: BTreeMap::new(),
            in_flight: Vec::new(),
            sample: Vec::new(),
            sample_bytes: 0,
            budget,
            stride: 1,
            seen: 0,
            first_intended_us: None,
        }
    }

    /// `records` folded (the tests' runs).
    #[cfg(test)]
    #[must_use]
    pub fn of_records(len_ms: u64, records: &[RequestRecord]) -> Self {
        let mut f = Self::new(len_ms, usize::MAX);
        for r in records {
            f.add(r.clone());
        }
        f
    }

    /// Watches the records of the run `opts` will drive (beside any other watcher) and folds
    /// every one into windows of `len_ms`; the task ends with the run. Needs a tokio runtime.
    pub fn watch(opts: &mut crate::loadgen::Options, len_ms: u64) -> JoinHandle<LoadFold> {
        let (tx, mut rx) = mpsc::channel::<RequestRecord>(WATCH_QUEUE);
        crate::loadgen::engine::observe::add(opts, tx);
        tokio::spawn(async move {
            let mut fold = LoadFold::new(len_ms, SAMPLE_BUDGET);
            while let Some(r) = rx.recv().await {
                fold.add(r);
            }
            fold
        })
    }

    /// Folds one finished request (taken: a sampled one is kept slimmed, without a copy).
    pub fn add(&mut self, r: RequestRecord) {
        self.seen += 1;
        self.first_intended_us = Some(
            self.first_intended_us
                .map_or(r.intended_us, |f| f.min(r.intended_us)),
        );
        let w = r.intended_us / 1000 / self.len_ms;
        self.windows.entry(w).or_default().add(&r);
        let (start, end) = ((r.actual_us / 1000) as usize, (r.end_us / 1000) as usize);
        if self.in_flight.len() <= end.max(start) {
            self.in_flight.resize(end.max(start) + 1, 0);
        }
        self.in_flight[start] += 1;
        self.in_flight[end] -= 1;
        if r.id.is_multiple_of(self.stride) {
            let kept = slim(r);
            self.sample_bytes += kept.footprint();
            self.sample.push(kept);
            while self.sample_bytes > self.budget && self.sample.len() > 1 {
                self.thin();
            }
        }
    }

    /// Keeps every second sampled request.
    fn thin(&mut self) {
        self.stride *= 2;
        let stride = self.stride;
        self.sample.retain(|r| r.id.is_multiple_of(stride));
        self.sample_bytes = self.sample.iter().map(RequestRecord::footprint).sum();
    }

    /// Window length, ms.
    #[must_use]
    pub fn len_ms(&self) -> u64 {
        self.len_ms
    }

    /// The earliest intended start folded (µs since the run's start).
    #[must_use]
    pub fn first_intended_us(&self) -> Option<u64> {
        self.first_intended_us
    }

    /// The windows folded, by index from the run's start.
    #[must_use]
    pub fn windows(&self) -> &BTreeMap<u64, Acc> {
        &self.windows
    }

    /// The sampled requests (every one, unless [`Self::cut`] says otherwise).
    #[must_use]
    pub fn sample(&self) -> &[RequestRecord] {
        &self.sample
    }

    /// The most requests in flight in each `len`-ms span of a ms clock, where `span(ms)` maps
    /// a ms since the run's start to its window.
    pub fn in_flight_max(&self, mut span: impl FnMut(u64) -> usize) -> BTreeMap<usize, u64> {
        let mut out: BTreeMap<usize, u64> = BTreeMap::new();
        let mut now = 0i64;
        for (ms, d) in self.in_flight.iter().enumerate() {
            now += i64::from(*d);
            if now > 0 || *d != 0 {
                let m = out.entry(span(ms as u64)).or_default();
                *m = (*m).max(now.max(0) as u64);
            }
        }
        out
    }

    /// What the sample left out, in one line; `None` when it holds every request.
    #[must_use]
    pub fn cut(&self) -> Option<String> {
        (self.stride > 1).then(|| {
            format!(
                "kernel joins, request parts and duplicate prefills are drawn from 1 in {} requests ({} of {}): the window fold keeps {} MiB of them; counts, rates and latency quantiles hold every request",
                self.stride,
                self.sample.len(),
                self.seen,
                self.budget >> 20
            )
        })
    }
}

/// `r` without what no window needs: its tokens past the first (its inter-token latencies are
/// already in the window's sketch), its messages and its steps.
fn slim(mut r: RequestRecord) -> RequestRecord {
    r.token_us.truncate(1);
    r.token_us.shrink_to_fit();
    r.error_message = None;
    r.finish_reason = None;
    r.steps = Vec::new();
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: u64, intended_ms: u64) -> RequestRecord {
        let mut r = RequestRecord::new(id, 0, Endpoint::Chat, intended_ms * 1000);
        r.actual_us = r.intended_us + 200;
        r.token_us = (0..50).map(|i| r.intended_us + (30 + i) * 1000).collect();
        r.end_us = *r.token_us.last().unwrap();
        r.output_tokens = Some(50);
        r
    }

    #[test]
    fn a_small_budget_thins_the_sample_evenly_and_says_so_while_windows_count_all() {
        let records: Vec<RequestRecord> = (0..4000).map(|i| record(i, i / 2)).collect();
        let one = slim(records[0].clone()).footprint();
        let mut f = LoadFold::new(1000, one * 600);
        for r in &records {
            f.add(r.clone());
        }
        let counted: u64 = f.windows().values().map(|a| a.requests).sum();
        assert_eq!(counted, 4000);
        assert_eq!(f.windows()[&0].itl.len(), 2000 * 49);
        // 4,000 requests in 600 requests' room: every eighth is kept, over the whole run.
        assert_eq!(f.sample().len(), 500);
        assert!(
            f.sample()
                .iter()
                .all(|r| r.id.is_multiple_of(8) && r.token_us.len() == 1)
        );
        assert!(f.sample().last().unwrap().id >= 3992);
        let cut = f.cut().unwrap();
        assert!(cut.contains("1 in 8 requests (500 of 4000)"), "{cut}");
        let all = LoadFold::of_records(1000, &records);
        assert_eq!((all.sample().len(), all.cut()), (4000, None));
    }

    #[test]
    fn in_flight_counts_requests_across_windows_they_span() {
        let mut long = record(0, 0);
        long.end_us = 2_500_000;
        let mut f = LoadFold::new(1000, usize::MAX);
        f.add(long);
        f.add(record(1, 100));
        f.add(record(2, 2_000));
        let m = f.in_flight_max(|ms| (ms / 1000) as usize);
        assert_eq!(m.get(&0), Some(&2));
        assert_eq!(
            m.get(&1),
            Some(&1),
            "the long request is in flight all through window 1"
        );
        assert_eq!(m.get(&2), Some(&2));
    }
}

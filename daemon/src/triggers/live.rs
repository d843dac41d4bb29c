//! The load generator's side of a window while the run is still going (`stress --explain`):
//! the collection pipeline folds the generator's records into the time line only after the
//! run, so triggers on client metrics (TTFT, error rate) read the records that *finished*
//! since the last window closed, as the generator hands them over
//! (`loadgen::Options::observer`). The report's time line keeps its own fold by
//! intended start; the two differ by the requests' latency.

use std::collections::{BTreeMap, HashSet};

use tokio::sync::mpsc;

use crate::collect::{
    load::{Sent, duplicate_prefills},
    timeline::{LoadSignals, Window},
};
use crate::measure::RequestRecord;
use crate::quantile::exact::quantiles;

/// Records waiting between two windows at most; a fuller channel slows the generator's
/// record collector (never its requests) until the next window drains it.
pub const CHANNEL: usize = 1 << 16;

/// Finished records not yet folded, and the scenario's phase names.
pub struct LiveLoad {
    rx: mpsc::Receiver<RequestRecord>,
    phases: Vec<String>,
    /// The LLM requests of the last fold, where a duplicate's twin may have finished.
    last: Vec<Sent>,
    /// The duplicates found in the last fold, not to be counted twice.
    counted: HashSet<u64>,
}

impl LiveLoad {
    /// A channel for `loadgen::Options::observer` and the reader of its other end;
    /// `phases` names the scenario's phases by index.
    #[must_use]
    pub fn channel(phases: Vec<String>) -> (mpsc::Sender<RequestRecord>, Self) {
        let (tx, rx) = mpsc::channel(CHANNEL);
        (
            tx,
            Self {
                rx,
                phases,
                last: Vec::new(),
                counted: HashSet::new(),
            },
        )
    }

    /// `w` with the load of the records that finished since the last call when it has none,
    /// and the phase most of them belonged to when it has none.
    #[must_use]
    pub fn fill(&mut self, w: &Window) -> Window {
        let mut out = w.clone();
        let mut records = Vec::new();
        while let Ok(r) = self.rx.try_recv() {
            records.push(r);
        }
        if records.is_empty() {
            return out;
        }
        if out.phase.is_none() {
            let mut count: BTreeMap<u32, usize> = BTreeMap::new();
            for r in &records {
                *count.entry(r.phase).or_default() += 1;
            }
            out.phase = count
                .into_iter()
                .max_by_key(|(_, n)| *n)
                .and_then(|(p, _)| self.phases.get(p as usize).cloned());
        }
        if out.load.is_none() {
            let mut load = fold(&records, w.len_ms);
            load.duplicate_prefill_share = self.duplicate_share(&records);
            out.load = Some(load);
        }
        out
    }

    /// The share of these records' LLM requests that computed a prefill their twin was still
    /// computing. Twins are looked for among the last fold's requests too: two copies sent
    /// together often finish on either side of a window's end. Each duplicate counts once,
    /// in the fold that found it.
    fn duplicate_share(&mut self, records: &[RequestRecord]) -> Option<f64> {
        let now: Vec<Sent> = records.iter().filter_map(Sent::of).collect();
        let found = duplicate_prefills(self.last.iter().chain(&now).copied()).ids;
        let new = found.difference(&self.counted).count();
        self.counted = found;
        self.last = now;
        (!self.last.is_empty()).then(|| (new as f64 / self.last.len() as f64).min(1.0))
    }
}

/// The window's load signals from the records that finished in it, but for the duplicate
/// prefills (`LiveLoad::duplicate_share`), which need the window before.
fn fold(records: &[RequestRecord], len_ms: u64) -> LoadSignals {
    let ms = |us: u64| us as f64 / 1000.0;
    let mut ttft: Vec<f64> = records.iter().filter_map(|r| r.ttft_us().map(ms)).collect();
    let mut itl: Vec<f64> = records
        .iter()
        .flat_map(|r| r.itl_us().map(ms).collect::<Vec<_>>())
        .collect();
    let mut e2e: Vec<f64> = records.iter().map(|r| ms(r.e2e_us())).collect();
    let mut lag: Vec<f64> = records
        .iter()
        .filter_map(|r| r.schedule_lag_us().map(ms))
        .collect();
    let secs = len_ms.max(1) as f64 / 1000.0;
    let mut endpoints: BTreeMap<_, usize> = BTreeMap::new();
    let mut error_classes = BTreeMap::new();
    for r in records {
        *endpoints.entry(r.endpoint).or_default() += 1;
        if let Some(c) = r.error.filter(|_| r.counts_as_error()) {
            *error_classes.entry(c).or_default() += 1;
        }
    }
    let recalls: Vec<f64> = records.iter().filter_map(|r| r.recall).collect();
    let tokens: u64 = records
        .iter()
        .map(|r| u64::from(r.output_tokens.unwrap_or(0)))
        .sum();
    LoadSignals {
        requests: records.len() as u64,
        errors: error_classes.values().sum(),
        target_rps: None,
        achieved_rps: records.len() as f64 / secs,
        in_flight_max: 0,
        ttft_ms: quantiles(&mut ttft),
        itl_ms: quantiles(&mut itl),
        e2e_ms: quantiles(&mut e2e),
        send_lag_ms: quantiles(&mut lag),
        output_tokens_per_s: tokens as f64 / secs,
        endpoint: endpoints
            .into_iter()
            .max_by_key(|(_, n)| *n)
            .map(|(e, _)| e),
        error_classes,
        recall_mean: (!recalls.is_empty())
            .then(|| recalls.iter().sum::<f64>() / recalls.len() as f64),
        phase_events_before: 0,
        duplicate_prefill_share: None,
        duplicate_prefill_chance: None,
        unsent: None,
    }
}

#[cfg(test)]
#[allow(clippy::float_cmp)]
mod tests {
    use super::*;
    use crate::measure::{Endpoint, ErrorClass};

    #[tokio::test]
    async fn finished_records_fill_a_window_without_load() {
        let (tx, mut live) = LiveLoad::channel(vec!["baseline".into(), "peak".into()]);
        let w = Window {
            len_ms: 1000,
            ..Window::default()
        };
        assert_eq!(live.fill(&w), w, "nothing finished: unchanged");
        for i in 0..4u64 {
            let mut r = RequestRecord::new(i, 1, Endpoint::Chat, 0);
            r.end_us = 100_000 * (i + 1);
            if i == 3 {
                r.fail(ErrorClass::Timeout, "slow");
            }
            tx.send(r).await.unwrap();
        }
        let got = live.fill(&w);
        assert_eq!(got.phase.as_deref(), Some("peak"));
        let l = got.load.unwrap();
        assert_eq!((l.requests, l.errors), (4, 1));
        assert_eq!(l.e2e_ms.unwrap().max, 400.0);
        assert_eq!(l.ttft_ms.unwrap().max, 300.0, "the failed one has no TTFT");
        assert!(live.fill(&w).load.is_none(), "drained");
    }

    #[tokio::test]
    async fn a_duplicate_whose_twin_finished_a_window_earlier_still_counts_once() {
        let (tx, mut live) = LiveLoad::channel(vec!["peak".into()]);
        let w = Window {
            len_ms: 1000,
            ..Window::default()
        };
        // The same prompt sent at 0 and 50 ms, its first token 100 ms after each send: the
        // second computed the prefill the first was still computing. The first finished in
        // one window, the second in the next; a third copy, much later, is none.
        let keyed = |id: u64, at_ms: u64| {
            let mut r = RequestRecord::new(id, 0, Endpoint::Chat, at_ms * 1000);
            r.token_us = vec![(at_ms + 100) * 1000];
            r.end_us = (at_ms + 900) * 1000;
            r.prompt_key = Some(7);
            r
        };
        let mut share = Vec::new();
        for r in [keyed(1, 0), keyed(2, 50), keyed(3, 5000)] {
            tx.send(r).await.unwrap();
            share.push(live.fill(&w).load.unwrap().duplicate_prefill_share);
        }
        assert_eq!(share, [Some(0.0), Some(1.0), Some(0.0)]);
        // Both copies in one window: one of two; the next window finds the pair again and
        // does not count it twice.
        tx.send(keyed(4, 9000)).await.unwrap();
        tx.send(keyed(5, 9050)).await.unwrap();
        assert_eq!(
            live.fill(&w).load.unwrap().duplicate_prefill_share,
            Some(0.5)
        );
        tx.send(keyed(6, 20_000)).await.unwrap();
        assert_eq!(
            live.fill(&w).load.unwrap().duplicate_prefill_share,
            Some(0.0)
        );
    }
}

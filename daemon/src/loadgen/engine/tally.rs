//! The tally: the task that owns a run's aggregates: it receives every finished request, feeds the
//! per-phase metrics, forwards records to an observer, draws the progress line and
//! aborts the run when the error rate crosses the scenario's threshold.

use std::{collections::VecDeque, time::Duration};

use tokio::{sync::mpsc, time::Instant};
use tokio_util::sync::CancellationToken;

use crate::measure::{
    metrics::{Hist, PhaseMetrics},
    record::RequestRecord,
    report::{EventRecord, Stop, StopKind},
    session::SessionRecord,
};

use crate::loadgen::engine::progress::{self, Progress};

/// Messages from dispatchers and request tasks.
#[derive(Debug)]
pub enum Msg {
    /// A phase began (and when, µs since the run's start).
    PhaseStart(u32, Instant, u64),
    /// A sampled vector query's ground truth was dropped (the worker was behind).
    RecallDropped(u32),
    /// A request finished (boxed: a record is large beside the other messages).
    Record(Box<RequestRecord>),
    /// `n` more requests of a phase reached their start time.
    Scheduled(u32, u64),
    /// `n` requests of a phase were dropped by a cap (or not sent by the phase's end).
    Dropped(u32, u64),
    /// An `events:` request finished.
    Event(EventRecord),
    /// A conversation of a phase ended: whether its task succeeded, and its inference
    /// consistency entropy (ICE) when its turns carried logprobs.
    Task(u32, bool, Option<f64>),
    /// An agentic session ended (its calls came as records before it).
    Session(Box<SessionRecord>),
}

/// Settings of the collector.
pub struct Config {
    /// Per phase: name, duration (s), mean target rate.
    pub phases: Vec<(String, f64, Option<f64>)>,
    /// Keep records for the report.
    pub keep_records: bool,
    /// Bytes of records kept at most; the rest are counted.
    pub records_budget: usize,
    /// Forward each record here as it completes.
    pub observer: Option<mpsc::Sender<RequestRecord>>,
    /// Draw the progress line.
    pub progress: bool,
    /// Abort threshold (fraction) and minimum finished requests in the window.
    pub abort: Option<(f64, u64)>,
}

/// What the collector hands back.
pub struct Collected {
    /// Per phase.
    pub metrics: Vec<PhaseMetrics>,
    /// Records (when kept), until the budget was spent.
    pub records: Vec<RequestRecord>,
    /// Records not kept because the budget was spent.
    pub records_overflow: u64,
    /// Event requests.
    pub events: Vec<EventRecord>,
    /// Why the run was aborted, if the collector aborted it.
    pub abort: Option<Stop>,
}

const WINDOW_TICKS: usize = 5;

/// Runs until every sender is dropped.
pub async fn run(mut rx: mpsc::Receiver<Msg>, cfg: Config, cancel: CancellationToken) -> Collected {
    let mut out = Collected {
        metrics: cfg.phases.iter().map(|_| PhaseMetrics::default()).collect(),
        records: Vec::new(),
        records_overflow: 0,
        events: Vec::new(),
        abort: None,
    };
    let mut current: Option<(u32, Instant)> = None;
    let mut budget_left = cfg.records_budget;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    // (finished, counted errors) per tick, for the abort window.
    let mut window: VecDeque<(u64, u64)> = VecDeque::new();
    let (mut win_fin, mut win_err) = (0u64, 0u64);
    loop {
        tokio::select! {
            msg = rx.recv() => match msg {
                None => break,
                Some(Msg::PhaseStart(i, at, at_us)) => {
                    current = Some((i, at));
                    out.metrics[i as usize].start_us = at_us;
                }
                Some(Msg::RecallDropped(i)) => out.metrics[i as usize].vector.dropped += 1,
                Some(Msg::Scheduled(i, n)) => out.metrics[i as usize].scheduled += n,
                Some(Msg::Dropped(i, n)) => out.metrics[i as usize].dropped += n,
                Some(Msg::Event(e)) => out.events.push(e),
                Some(Msg::Task(i, ok, ice)) => out.metrics[i as usize].task(ok, ice),
                Some(Msg::Session(ended)) => {
                    // Kept within the same budget as the records.
                    let size = ended.footprint();
                    let keep = cfg.keep_records && size <= budget_left;
                    if keep {
                        budget_left -= size;
                    }
                    out.metrics[ended.phase as usize].sessions.observe(*ended, keep);
                }
                Some(Msg::Record(r)) => {
                    out.metrics[r.phase as usize].record(&r);
                    win_fin += 1;
                    win_err += u64::from(r.counts_as_error());
                    if let Some(obs) = &cfg.observer {
                        // A slow observer slows the collector, never the request tasks.
                        let _ = obs.send((*r).clone()).await;
                    }
                    if cfg.keep_records {
                        let size = r.footprint();
                        if size <= budget_left {
                            budget_left -= size;
                            out.records.push(*r);
                        } else {
                            // Once full, stay full: the kept records are the run's first ones.
                            budget_left = 0;
                            out.records_overflow += 1;
                        }
                    }
                }
            },
            _ = tick.tick() => {
                window.push_back((win_fin, win_err));
                (win_fin, win_err) = (0, 0);
                if window.len() > WINDOW_TICKS {
                    window.pop_front();
                }
                if let Some((limit, min)) = cfg.abort
                    && out.abort.is_none()
                {
                    let (f, e) = window.iter().fold((0, 0), |a, w| (a.0 + w.0, a.1 + w.1));
                    if f >= min && e as f64 / f as f64 > limit {
                        out.abort = Some(Stop::new(StopKind::Aborted, format!(
                            "error rate {:.1}% over the last {}s is above abort_error_rate {:.1}%",
                            e as f64 * 100.0 / f as f64, window.len(), limit * 100.0
                        )));
                        cancel.cancel();
                    }
                }
                if cfg.progress && let Some((i, at)) = current {
                    let m = &out.metrics[i as usize];
                    let (name, dur, rate) = &cfg.phases[i as usize];
                    let h = if m[Hist::Ttft].is_empty() { Hist::E2e } else { Hist::Ttft };
                    Progress {
                        phase: name,
                        elapsed_s: at.elapsed().as_secs_f64().min(*dur),
                        duration_s: *dur,
                        finished: m.finished,
                        target_rate: *rate,
                        p99_of: h.name(),
                        p99_ms: (!m[h].is_empty()).then(|| m.summary(h).p99),
                        errors: m.counted_errors,
                        dropped: m.dropped,
                    }
                    .draw();
                }
            }
        }
    }
    if cfg.progress {
        progress::clear();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::{Endpoint, ErrorClass};

    /// Sends `ok` good and `failed` failed records of phase 0.
    async fn finish(tx: &mpsc::Sender<Msg>, ok: u64, failed: u64) {
        for i in 0..ok + failed {
            let mut r = RequestRecord::new(i, 0, Endpoint::Chat, 0);
            if i >= ok {
                r.fail(ErrorClass::Connect, "refused");
            }
            tx.send(Msg::Record(Box::new(r))).await.unwrap();
        }
    }

    /// On paused time: each tick closes a second of the abort window whatever the wall clock;
    /// the test wakes half-way between two ticks, once the tally has judged the window.
    #[tokio::test(start_paused = true)]
    async fn the_error_rate_over_the_window_aborts_the_run_past_the_threshold() {
        let (tx, rx) = mpsc::channel(64);
        let cancel = CancellationToken::new();
        let cfg = Config {
            phases: vec![("a".into(), 30.0, Some(100.0))],
            keep_records: false,
            records_budget: 0,
            observer: None,
            progress: false,
            abort: Some((0.5, 20)),
        };
        let tally = tokio::spawn(run(rx, cfg, cancel.clone()));
        let half = Duration::from_millis(500);
        // t=0.5 s, after the first (empty) tick.
        tokio::time::sleep(half).await;
        // 10 of 19 failed: too few to judge.
        finish(&tx, 9, 10).await;
        tokio::time::sleep(2 * half).await;
        assert!(!cancel.is_cancelled());
        // 10 of 20: at the threshold, not above it.
        finish(&tx, 1, 0).await;
        tokio::time::sleep(2 * half).await;
        assert!(!cancel.is_cancelled());
        // 12 of 22.
        finish(&tx, 0, 2).await;
        tokio::time::sleep(2 * half).await;
        assert!(cancel.is_cancelled());
        drop(tx);
        let out = tally.await.unwrap();
        assert_eq!(out.metrics[0].finished, 22);
        let stop = out.abort.expect("aborted");
        assert_eq!(stop.kind, StopKind::Aborted);
        assert_eq!(
            stop.why,
            "error rate 54.5% over the last 4s is above abort_error_rate 50.0%"
        );
    }
}

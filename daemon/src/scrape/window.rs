//! Successive scrapes -> per-window values.
//!
//! Counters become rates per second, histograms become per-window quantiles
//! computed from the bucket deltas (linear interpolation inside a bucket, as
//! Prometheus' `histogram_quantile` does), gauges keep their last and largest
//! value. A counter or histogram that went backwards was reset (server
//! restart): as in Prometheus' `increase`, the new value is the increase since
//! the reset.

use std::time::{Duration, Instant};

use super::mapping::{Histogram, ServerKind, Signals};
use crate::quantile::{Quantile, buckets::Cumulative};

/// A gauge over one window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GaugeWindow {
    /// Value at the last scrape of the window.
    pub last: f64,
    /// Largest value seen at any scrape of the window.
    pub max: f64,
}

/// Latency observations that completed inside one window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatencyWindow {
    /// Observations in the window.
    pub count: f64,
    /// Mean in seconds (sum delta / count delta).
    pub mean: f64,
    /// Median estimate in seconds.
    pub p50: f64,
    /// 95th percentile estimate in seconds.
    pub p95: f64,
    /// 99th percentile estimate in seconds.
    pub p99: f64,
}

/// The server's signals over one window.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowSignals {
    /// The server kind at the last scrape.
    pub server: ServerKind,
    /// Time between the window's baseline scrape and its last scrape.
    pub elapsed: Duration,
    /// Running requests.
    pub running: Option<GaugeWindow>,
    /// Waiting requests.
    pub waiting: Option<GaugeWindow>,
    /// KV-cache usage 0..1.
    pub kv_usage: Option<GaugeWindow>,
    /// `SGLang`'s retracted-requests gauge.
    pub retracted_reqs: Option<GaugeWindow>,
    /// KV blocks on the GPU (vLLM), from the last scrape.
    pub num_gpu_blocks: Option<u64>,
    /// The engine's cap on running requests, from the last scrape (`super::engine_info`).
    pub max_running: Option<f64>,
    /// vLLM preemptions per second.
    pub preemptions_per_s: Option<f64>,
    /// Prefix-cache hits / queries in this window (vLLM counters), or `SGLang`'s
    /// hit-rate gauge at the last scrape. `None` when nothing was queried.
    pub prefix_cache_hit_rate: Option<f64>,
    /// Prompt tokens looked up in the prefix cache in this window (vLLM's counter): the hit
    /// rate's denominator, which weighs windows against each other.
    pub prefix_cache_queries: Option<f64>,
    /// Prompt tokens per second.
    pub prompt_tokens_per_s: Option<f64>,
    /// Generated tokens per second.
    pub generation_tokens_per_s: Option<f64>,
    /// Mean sequences per engine step in the window (llama.cpp: the increase of busy slots
    /// summed over steps, `n_busy_slots_per_decode` x `n_decode_total`, over the increase of
    /// steps); 0 when the engine took no step. `None` for servers without those counters.
    pub batch_mean: Option<f64>,
    /// Seconds per generated token, per sequence, of the requests that ended in the window
    /// (llama.cpp: generation seconds over tokens generated).
    pub generation_s_per_token: Option<f64>,
    /// Queue time of requests admitted in the window.
    pub queue_time: Option<LatencyWindow>,
    /// Time to first token.
    pub ttft: Option<LatencyWindow>,
    /// Inter-token latency.
    pub itl: Option<LatencyWindow>,
    /// Vector searches per second.
    pub vector_searches_per_s: Option<f64>,
    /// Index rebuild activity: 1 for each scrape that found a rebuild running, plus the
    /// rebuilds completed in the window (a rebuild shorter than a scrape interval still counts);
    /// 0 when the service reports its index idle.
    pub index_rebuild: Option<f64>,
}

impl WindowSignals {
    /// Preemption activity, whichever form the server reports: vLLM
    /// preemptions per second, or `SGLang`'s largest retracted-requests count.
    #[must_use]
    pub fn preemption_activity(&self) -> Option<f64> {
        self.preemptions_per_s
            .or(self.retracted_reqs.map(|g| g.max))
    }
}

/// Folds scrapes into windows: [`push`](Self::push) each scrape, then
/// [`finish`](Self::finish) at the end of each window.
#[derive(Debug, Default)]
pub struct WindowBuilder {
    prev: Option<(Instant, Signals)>,
    start: Option<Instant>,
    acc: Accumulated,
}

#[derive(Debug, Default)]
struct Accumulated {
    pushes: usize,
    gauges: [Option<GaugeWindow>; 4],
    vector_searches: Option<f64>,
    rebuilding_scrapes: Option<f64>,
    rebuilds: Option<f64>,
    preemptions: Option<f64>,
    prefix_queries: Option<f64>,
    prefix_hits: Option<f64>,
    prompt_tokens: Option<f64>,
    generation_tokens: Option<f64>,
    generation_seconds: Option<f64>,
    decode_steps: Option<f64>,
    busy_slots: Option<f64>,
    queue_time: Option<Histogram>,
    ttft: Option<Histogram>,
    itl: Option<Histogram>,
}

impl WindowBuilder {
    /// An empty builder; the first scrape pushed is only a baseline.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a scrape taken at `at`. Scrapes must be pushed in time order.
    pub fn push(&mut self, at: Instant, cur: Signals) {
        if let Some((_, prev)) = &self.prev {
            // A window covers the scrapes after its baseline, so the very
            // first scrape, like every later baseline, sets no gauge.
            let gauges = [cur.running, cur.waiting, cur.kv_usage, cur.retracted_reqs];
            for (slot, value) in self.acc.gauges.iter_mut().zip(gauges) {
                if let Some(v) = value {
                    *slot = Some(GaugeWindow {
                        last: v,
                        max: slot.map_or(v, |g| g.max.max(v)),
                    });
                }
            }
            let a = &mut self.acc;
            if let Some(r) = cur.index_rebuilding {
                a.rebuilding_scrapes = Some(a.rebuilding_scrapes.unwrap_or(0.0) + r.min(1.0));
            }
            add(
                &mut a.vector_searches,
                prev.vector_searches_total,
                cur.vector_searches_total,
            );
            add(
                &mut a.rebuilds,
                prev.index_rebuilds_total,
                cur.index_rebuilds_total,
            );
            add(
                &mut a.preemptions,
                prev.preemptions_total,
                cur.preemptions_total,
            );
            add(
                &mut a.prefix_queries,
                prev.prefix_cache_queries_total,
                cur.prefix_cache_queries_total,
            );
            add(
                &mut a.prefix_hits,
                prev.prefix_cache_hits_total,
                cur.prefix_cache_hits_total,
            );
            add(
                &mut a.prompt_tokens,
                prev.prompt_tokens_total,
                cur.prompt_tokens_total,
            );
            add(
                &mut a.generation_tokens,
                prev.generation_tokens_total,
                cur.generation_tokens_total,
            );
            add(
                &mut a.generation_seconds,
                prev.generation_seconds_total,
                cur.generation_seconds_total,
            );
            add(
                &mut a.decode_steps,
                prev.decode_steps_total,
                cur.decode_steps_total,
            );
            // An average since start times its step count is the busy slots summed over every
            // step since start: a counter like the others.
            add(
                &mut a.busy_slots,
                busy_slot_steps(prev),
                busy_slot_steps(&cur),
            );
            add_hist(
                &mut a.queue_time,
                prev.queue_time.as_ref(),
                cur.queue_time.as_ref(),
            );
            add_hist(&mut a.ttft, prev.ttft.as_ref(), cur.ttft.as_ref());
            add_hist(&mut a.itl, prev.itl.as_ref(), cur.itl.as_ref());
            a.pushes += 1;
        } else {
            self.start = Some(at);
        }
        self.prev = Some((at, cur));
    }

    /// Closes the current window. `None` until two scrapes have been pushed
    /// since the last window (or ever); the last scrape becomes the next baseline.
    pub fn finish(&mut self) -> Option<WindowSignals> {
        let (end, last) = self.prev.as_ref()?;
        let start = self.start?;
        if self.acc.pushes == 0 {
            return None;
        }
        let acc = std::mem::take(&mut self.acc);
        self.start = Some(*end);
        let elapsed = end.saturating_duration_since(start);
        let secs = elapsed.as_secs_f64();
        let rate = |d: Option<f64>| d.filter(|_| secs > 0.0).map(|d| d / secs);
        let [running, waiting, kv_usage, retracted_reqs] = acc.gauges;
        let prefix_cache_hit_rate = match (acc.prefix_hits, acc.prefix_queries) {
            (Some(h), Some(q)) if q > 0.0 => Some((h / q).clamp(0.0, 1.0)),
            (Some(_), Some(_)) => None,
            _ => last.prefix_cache_hit_rate,
        };
        Some(WindowSignals {
            server: last.server,
            elapsed,
            running,
            waiting,
            kv_usage,
            retracted_reqs,
            num_gpu_blocks: last.num_gpu_blocks,
            max_running: last.max_running,
            preemptions_per_s: rate(acc.preemptions),
            prefix_cache_hit_rate,
            prefix_cache_queries: acc.prefix_queries,
            prompt_tokens_per_s: rate(acc.prompt_tokens),
            generation_tokens_per_s: rate(acc.generation_tokens),
            batch_mean: match (acc.busy_slots, acc.decode_steps) {
                (Some(b), Some(n)) if n >= 1.0 => Some(b / n),
                (Some(_), Some(_)) => Some(0.0),
                _ => None,
            },
            generation_s_per_token: match (acc.generation_seconds, acc.generation_tokens) {
                (Some(s), Some(n)) if n > 0.0 => Some(s / n),
                _ => None,
            },
            queue_time: acc.queue_time.as_ref().and_then(latency),
            ttft: acc.ttft.as_ref().and_then(latency),
            itl: acc.itl.as_ref().and_then(latency),
            vector_searches_per_s: rate(acc.vector_searches),
            index_rebuild: match (acc.rebuilding_scrapes, acc.rebuilds) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
            },
        })
    }
}

/// Busy slots summed over every engine step since start (llama.cpp exports their mean).
fn busy_slot_steps(s: &Signals) -> Option<f64> {
    Some(s.busy_slots_per_decode? * s.decode_steps_total?)
}

/// Counter increase between two scrapes; a decrease means a reset.
fn increase(prev: f64, cur: f64) -> f64 {
    if cur >= prev { cur - prev } else { cur }
}

fn add(acc: &mut Option<f64>, prev: Option<f64>, cur: Option<f64>) {
    if let (Some(p), Some(c)) = (prev, cur) {
        *acc = Some(acc.unwrap_or(0.0) + increase(p, c));
    }
}

/// Adds the bucket-wise increase between two cumulative histograms.
fn add_hist(acc: &mut Option<Histogram>, prev: Option<&Histogram>, cur: Option<&Histogram>) {
    let (Some(p), Some(c)) = (prev, cur) else {
        return;
    };
    let same_layout = c.buckets.len() == p.buckets.len()
        && c.buckets
            .iter()
            .zip(&p.buckets)
            .all(|(x, y)| x.0.total_cmp(&y.0).is_eq());
    let reset = c.count < p.count || !same_layout;
    let delta = if reset {
        c.clone()
    } else {
        let buckets = c
            .buckets
            .iter()
            .zip(&p.buckets)
            .map(|(&(le, cc), &(_, pc))| (le, increase(pc, cc)))
            .collect();
        Histogram {
            buckets,
            count: c.count - p.count,
            sum: increase(p.sum, c.sum),
        }
    };
    *acc = Some(match acc.take() {
        Some(a) if a.buckets.len() == delta.buckets.len() => Histogram {
            buckets: a
                .buckets
                .iter()
                .zip(&delta.buckets)
                .map(|(&(le, x), &(_, y))| (le, x + y))
                .collect(),
            count: a.count + delta.count,
            sum: a.sum + delta.sum,
        },
        // First pair of the window, or the layout changed mid-window (a
        // restart with other buckets): keep the newer part.
        _ => delta,
    });
}

fn latency(h: &Histogram) -> Option<LatencyWindow> {
    if h.count <= 0.0 {
        return None;
    }
    Some(LatencyWindow {
        count: h.count,
        mean: h.sum / h.count,
        p50: Cumulative(&h.buckets).quantile(0.5)?,
        p95: Cumulative(&h.buckets).quantile(0.95)?,
        p99: Cumulative(&h.buckets).quantile(0.99)?,
    })
}

#[cfg(test)]
#[path = "window_tests.rs"]
mod tests;

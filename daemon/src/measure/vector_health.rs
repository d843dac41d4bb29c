//! The seed's joint view of a vector phase and its index health: recall@k of the sampled
//! queries beside their latency (recall per latency band, the latency of the queries whose
//! recall fell below a threshold), and recall over the run in windows (drift; a rebuild
//! advised when a window's recall falls below 92%).

use serde::{Deserialize, Serialize};

use crate::quantile::exact::rounded_rank;

/// Sampled queries kept per phase at most (the rest count, their pairs are not kept).
pub const MAX_SAMPLES: usize = 200_000;
/// Default recall below which a query counts as low-recall in the joint view.
pub const LOW_RECALL: f64 = 0.9;
/// The seed's rule: rebuild the index when recall falls below 92%.
pub const REBUILD_BELOW: f64 = 0.92;

/// One sampled query: when it ended, its latency and its recall.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// End, µs since the phase started.
    pub at_us: u64,
    /// End-to-end latency, µs.
    pub e2e_us: u64,
    /// recall@k.
    pub recall: f64,
}

/// Seconds of per-second latency kept per phase at most.
const MAX_SECONDS: usize = 7 * 24 * 3600;

/// The sampled queries of a phase, and the latency of all its queries per second.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    /// Kept pairs.
    pub kept: Vec<Sample>,
    /// Samples whose ground truth was dropped (the worker fell behind).
    pub dropped: u64,
    /// Per second of the phase: successful queries and the sum of their latency, ms.
    pub per_second: Vec<(u64, f64)>,
}

/// A second whose mean latency stood far above the phase's usual: what an index rebuild (or
/// a compaction) looks like from the client.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Spike {
    /// Start, seconds into the phase.
    pub start_s: f64,
    /// Mean e2e latency of its queries, ms.
    pub e2e_mean_ms: f64,
    /// Queries in it.
    pub queries: u64,
}

impl Samples {
    /// Adds one successful query ending `at_us` into the phase.
    pub fn observe(&mut self, at_us: u64, e2e_us: u64) {
        let s = (at_us / 1_000_000) as usize;
        if s >= MAX_SECONDS {
            return;
        }
        if self.per_second.len() <= s {
            self.per_second.resize(s + 1, (0, 0.0));
        }
        self.per_second[s].0 += 1;
        self.per_second[s].1 += e2e_us as f64 / 1000.0;
    }

    /// Seconds whose mean latency is over 3x the median second's (and 20 ms above it), with
    /// at least 3 queries; and that median.
    #[must_use]
    pub fn spikes(&self) -> (Vec<Spike>, Option<f64>) {
        let means: Vec<(usize, f64, u64)> = self
            .per_second
            .iter()
            .enumerate()
            .filter(|(_, (n, _))| *n >= 3)
            .map(|(i, (n, sum))| (i, sum / *n as f64, *n))
            .collect();
        if means.len() < 3 {
            return (Vec::new(), None);
        }
        let mut sorted: Vec<f64> = means.iter().map(|m| m.1).collect();
        sorted.sort_by(f64::total_cmp);
        let Some(median) = rounded_rank(&sorted, 0.5) else {
            return (Vec::new(), None);
        };
        let spikes = means
            .iter()
            .filter(|(_, m, _)| *m > 3.0 * median && *m > median + 20.0)
            .map(|(i, m, n)| Spike {
                start_s: *i as f64,
                e2e_mean_ms: *m,
                queries: *n,
            })
            .collect();
        (spikes, Some(median))
    }

    /// Adds one.
    pub fn push(&mut self, s: Sample) {
        if self.kept.len() < MAX_SAMPLES {
            self.kept.push(s);
        }
    }

    /// Recall over the phase in windows of `window_s` seconds.
    #[must_use]
    pub fn windows(&self, window_s: f64) -> Vec<Window> {
        let w_us = (window_s * 1e6).max(1.0);
        let mut out: Vec<Window> = Vec::new();
        let mut sorted: Vec<&Sample> = self.kept.iter().collect();
        sorted.sort_by_key(|s| s.at_us);
        for s in sorted {
            let i = (s.at_us as f64 / w_us).floor() as usize;
            let start_s = i as f64 * window_s;
            match out.last_mut() {
                Some(w) if (w.start_s - start_s).abs() < 1e-9 => {
                    w.recall_mean =
                        (w.recall_mean * w.queries as f64 + s.recall) / (w.queries + 1) as f64;
                    w.queries += 1;
                }
                _ => out.push(Window {
                    start_s,
                    recall_mean: s.recall,
                    queries: 1,
                }),
            }
        }
        out
    }

    /// Index health over windows of `window_s`, judged against `rebuild_below`.
    #[must_use]
    pub fn health(&self, window_s: f64, rebuild_below: f64) -> Option<Health> {
        let all = self.windows(window_s);
        let first = all.first()?.recall_mean;
        let last = all.last()?.recall_mean;
        let worst = all
            .iter()
            .min_by(|a, b| a.recall_mean.total_cmp(&b.recall_mean))?;
        Some(Health {
            window_s,
            drift: first - last,
            min_window_recall: worst.recall_mean,
            min_window_start_s: worst.start_s,
            rebuild_below,
            rebuild_advised: worst.recall_mean < rebuild_below,
            windows: all,
        })
    }

    /// The joint view; `edges_ms` are the phase's latency percentiles (p50, p90, p99, p999).
    #[must_use]
    pub fn joint(&self, edges_ms: [(&str, f64); 4], low: f64) -> Joint {
        let mut bands: Vec<Band> = Vec::new();
        let mut lower = 0.0;
        for (i, (name, upper)) in edges_ms
            .iter()
            .map(|(n, v)| (format!("<={n}"), Some(*v)))
            .chain(std::iter::once((format!(">{}", edges_ms[3].0), None)))
            .enumerate()
        {
            let inside: Vec<f64> = self
                .kept
                .iter()
                .filter(|s| {
                    let ms = s.e2e_us as f64 / 1000.0;
                    (i == 0 || ms > lower) && upper.is_none_or(|u| ms <= u)
                })
                .map(|s| s.recall)
                .collect();
            bands.push(Band {
                band: name,
                upper_ms: upper,
                queries: inside.len() as u64,
                recall_mean: (!inside.is_empty())
                    .then(|| inside.iter().sum::<f64>() / inside.len() as f64),
            });
            lower = upper.unwrap_or(f64::INFINITY);
        }
        let mut low_ms: Vec<f64> = self
            .kept
            .iter()
            .filter(|s| s.recall < low)
            .map(|s| s.e2e_us as f64 / 1000.0)
            .collect();
        low_ms.sort_by(f64::total_cmp);
        let q = |p: f64| rounded_rank(&low_ms, p);
        Joint {
            sampled: self.kept.len() as u64,
            dropped: self.dropped,
            by_latency: bands,
            low_recall: LowRecall {
                below: low,
                queries: low_ms.len() as u64,
                e2e_p50_ms: q(0.5),
                e2e_p99_ms: q(0.99),
                e2e_max_ms: low_ms.last().copied(),
            },
        }
    }
}

/// Recall in one window of the run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Window {
    /// Start, seconds into the phase.
    pub start_s: f64,
    /// Mean recall@k of its sampled queries.
    pub recall_mean: f64,
    /// Sampled queries in it.
    pub queries: u64,
}

/// Index health of a phase.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Health {
    /// Window length, seconds.
    pub window_s: f64,
    /// First window's recall minus the last's (positive: recall fell).
    pub drift: f64,
    /// The lowest window's recall.
    pub min_window_recall: f64,
    /// Where it started, seconds into the phase.
    pub min_window_start_s: f64,
    /// The threshold of the rebuild advice.
    pub rebuild_below: f64,
    /// A window's recall fell below `rebuild_below`.
    pub rebuild_advised: bool,
    /// Recall per window.
    pub windows: Vec<Window>,
}

/// Recall of the queries within one latency band.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Band {
    /// `<=p50`, `<=p90`, `<=p99`, `<=p999`, `>p999`.
    pub band: String,
    /// Upper edge, ms (none for the last band).
    pub upper_ms: Option<f64>,
    /// Sampled queries in it.
    pub queries: u64,
    /// Their mean recall.
    pub recall_mean: Option<f64>,
}

/// Latency of the queries whose recall fell below a threshold.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct LowRecall {
    /// The threshold.
    pub below: f64,
    /// How many.
    pub queries: u64,
    /// Their median latency, ms.
    pub e2e_p50_ms: Option<f64>,
    /// Their 99th percentile, ms.
    pub e2e_p99_ms: Option<f64>,
    /// Their slowest, ms.
    pub e2e_max_ms: Option<f64>,
}

/// Recall and latency together.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Joint {
    /// Sampled queries with a recall.
    pub sampled: u64,
    /// Samples whose ground truth was dropped.
    pub dropped: u64,
    /// Recall per latency band.
    pub by_latency: Vec<Band>,
    /// The low-recall queries' latency.
    pub low_recall: LowRecall,
}

/// The vector part of a phase's report.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct VectorView {
    /// `ef_search` of the phase (a sweep's step).
    pub ef_search: Option<u32>,
    /// The phase a sweep step belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep_of: Option<String>,
    /// Recall and latency together.
    pub joint: Joint,
    /// Recall over the run.
    pub health: Option<Health>,
    /// Seconds whose latency spiked (an index rebuild or compaction, as the client sees it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spikes: Vec<Spike>,
    /// The median second's mean latency, ms (what a spike is measured against).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e2e_median_second_ms: Option<f64>,
}

/// Window length for a phase of `duration_s`: a tenth of it, 1 s to 60 s.
#[must_use]
pub fn window_for(duration_s: f64) -> f64 {
    (duration_s / 10.0).clamp(1.0, 60.0).round()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(at_ms: u64, e2e_ms: u64, recall: f64) -> Sample {
        Sample {
            at_us: at_ms * 1000,
            e2e_us: e2e_ms * 1000,
            recall,
        }
    }

    #[test]
    fn joint_view_and_drift() {
        let mut x = Samples::default();
        for i in 0..10 {
            x.push(s(i * 100, 5, 1.0));
        }
        // Late and slow queries with poor recall (an index being rebuilt).
        for i in 0..5 {
            x.push(s(2000 + i * 100, 400, 0.5));
        }
        let j = x.joint(
            [("p50", 5.0), ("p90", 10.0), ("p99", 300.0), ("p999", 450.0)],
            0.9,
        );
        assert_eq!(j.sampled, 15);
        assert_eq!(j.by_latency[0].queries, 10);
        assert_eq!(j.by_latency[0].recall_mean, Some(1.0));
        assert_eq!(j.by_latency[3].queries, 5);
        assert_eq!(j.by_latency[3].recall_mean, Some(0.5));
        assert_eq!(j.low_recall.queries, 5);
        assert_eq!(j.low_recall.e2e_p50_ms, Some(400.0));
        let h = x.health(1.0, REBUILD_BELOW).unwrap();
        assert_eq!(h.windows.len(), 2);
        assert!((h.drift - 0.5).abs() < 1e-9);
        assert!(h.rebuild_advised);
        assert!((h.min_window_start_s - 2.0).abs() < 1e-9);
        assert!(Samples::default().health(1.0, 0.9).is_none());
    }

    #[test]
    fn seconds_of_rebuild_latency_are_spikes() {
        let mut x = Samples::default();
        for sec in 0..10u64 {
            let e2e_ms = if sec == 4 || sec == 5 { 500 } else { 3 };
            for i in 0..5 {
                x.observe(sec * 1_000_000 + i * 100_000, e2e_ms * 1000);
            }
        }
        let (spikes, median) = x.spikes();
        assert_eq!(median, Some(3.0));
        let at: Vec<f64> = spikes.iter().map(|s| s.start_s).collect();
        assert_eq!(at, [4.0, 5.0]);
        assert!((spikes[0].e2e_mean_ms - 500.0).abs() < 1e-9);
    }
}

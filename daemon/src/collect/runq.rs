//! Run-queue delay histograms in userspace: interval deltas, merges and percentiles.

use probe_common::runqlat::{Hist, SLOTS};

use crate::quantile::{Quantile, buckets::log2_quantile};

/// A log2 histogram of run-queue delay (µs), as the kernel records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunqHist(pub Hist);

impl Default for RunqHist {
    fn default() -> Self {
        Self(Hist::ZERO)
    }
}

impl RunqHist {
    /// Number of samples.
    #[must_use]
    pub fn count(&self) -> u64 {
        self.0.count
    }

    /// Mean delay in µs (0 when empty).
    #[must_use]
    pub fn mean_us(&self) -> f64 {
        if self.0.count == 0 {
            0.0
        } else {
            self.0.sum_us as f64 / self.0.count as f64
        }
    }

    /// What was recorded since `earlier` (counters only grow; a reset counts from zero).
    #[must_use]
    pub fn since(&self, earlier: &Self) -> Self {
        let mut out = Hist::ZERO;
        for i in 0..SLOTS {
            out.slots[i] = self.0.slots[i].saturating_sub(earlier.0.slots[i]);
        }
        out.count = self.0.count.saturating_sub(earlier.0.count);
        out.sum_us = self.0.sum_us.saturating_sub(earlier.0.sum_us);
        out.self_us = self.0.self_us.saturating_sub(earlier.0.self_us);
        Self(out)
    }

    /// Adds `other` into `self`.
    pub fn merge(&mut self, other: &Self) {
        for i in 0..SLOTS {
            self.0.slots[i] += other.0.slots[i];
        }
        self.0.count += other.0.count;
        self.0.sum_us += other.0.sum_us;
        self.0.self_us += other.0.self_us;
    }

    /// The `q`-quantile in µs: [`Quantile::quantile`], by the name `cli/runqlat.rs` and the
    /// integration tests read it by.
    #[must_use]
    pub fn quantile_us(&self, q: f64) -> Option<f64> {
        self.quantile(q)
    }

    /// Non-empty buckets as `(low_us, high_us_inclusive, count)`, lowest first, spanning from the
    /// first to the last non-empty bucket (bcc prints the empty ones in between too).
    #[must_use]
    pub fn rows(&self) -> Vec<(u64, u64, u64)> {
        let s = &self.0.slots;
        let Some(first) = s.iter().position(|&n| n > 0) else {
            return Vec::new();
        };
        let last = s.iter().rposition(|&n| n > 0).unwrap_or(first);
        (first..=last)
            .map(|i| {
                let lo = if i == 0 { 0 } else { 1u64 << i };
                (lo, (1u64 << (i + 1)) - 1, s[i])
            })
            .collect()
    }
}

impl Quantile for RunqHist {
    /// µs, interpolated linearly inside its log2 bucket `[2^i, 2^(i+1))`.
    fn quantile(&self, q: f64) -> Option<f64> {
        log2_quantile(&self.0.slots, q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use probe_common::runqlat::log2_slot;

    fn hist(samples: &[u64]) -> RunqHist {
        let mut h = Hist::ZERO;
        for &v in samples {
            h.slots[log2_slot(v)] += 1;
            h.count += 1;
            h.sum_us += v;
        }
        RunqHist(h)
    }

    #[test]
    fn quantiles_stay_inside_the_right_bucket() {
        let h = hist(&[3, 3, 3, 3, 3, 3, 3, 3, 3, 1000]);
        let p50 = h.quantile_us(0.5).unwrap();
        assert!((2.0..4.0).contains(&p50), "{p50}");
        let p99 = h.quantile_us(0.99).unwrap();
        assert!((512.0..=1024.0).contains(&p99), "{p99}");
        assert_eq!(RunqHist::default().quantile_us(0.5), None);
    }

    #[test]
    fn since_and_merge_are_inverse() {
        let a = hist(&[1, 10, 100]);
        let mut b = a;
        b.merge(&hist(&[5, 50]));
        let d = b.since(&a);
        assert_eq!(d, hist(&[5, 50]));
        assert!((d.mean_us() - 27.5).abs() < 1e-9);
    }

    #[test]
    fn rows_span_first_to_last_bucket() {
        let rows = hist(&[0, 9]).rows();
        assert_eq!(rows.first(), Some(&(0, 1, 1)));
        assert_eq!(rows.last(), Some(&(8, 15, 1)));
        assert_eq!(rows.len(), 4);
    }

    #[test]
    fn log2_slots_match_bcc() {
        assert_eq!(log2_slot(0), 0);
        assert_eq!(log2_slot(1), 0);
        assert_eq!(log2_slot(2), 1);
        assert_eq!(log2_slot(3), 1);
        assert_eq!(log2_slot(4), 2);
        assert_eq!(log2_slot(u64::MAX), SLOTS - 1);
    }
}

//! Quantiles of bucketed counts: HDR histograms, Prometheus cumulative buckets and the
//! kernel's log2 histograms.

use hdrhistogram::Histogram;

use super::Quantile;

/// An empty histogram of µs (or of a scaled value): 1 .. 1 h at 3 significant digits; larger
/// values are clamped to the top. The one constructor of the HDR histograms reports keep (and
/// of the sim's exact lateness summaries).
#[must_use]
pub fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("static bounds are valid")
}

impl Quantile for Histogram<u64> {
    /// `value_at_quantile`, in the histogram's own unit.
    fn quantile(&self, q: f64) -> Option<f64> {
        (!self.is_empty()).then(|| self.value_at_quantile(q) as f64)
    }

    fn largest(&self) -> Option<f64> {
        (!self.is_empty()).then(|| self.max() as f64)
    }
}

/// Prometheus cumulative buckets: `(le, cumulative count)` sorted by `le`, the last bound
/// `+Inf`.
#[derive(Debug, Clone, Copy)]
pub struct Cumulative<'a>(pub &'a [(f64, f64)]);

impl Quantile for Cumulative<'_> {
    /// Like `histogram_quantile`: linear inside the bucket the rank falls in; the largest
    /// finite bound when it falls in `+Inf`'s. `None` when there are no observations or no
    /// `+Inf` bucket.
    fn quantile(&self, q: f64) -> Option<f64> {
        let buckets = self.0;
        let &(top, total) = buckets.last()?;
        // Like Prometheus: a +Inf bucket and at least one finite bound are needed.
        if top != f64::INFINITY || buckets.len() < 2 || total.is_nan() || total <= 0.0 || q.is_nan()
        {
            return None;
        }
        let q = q.clamp(0.0, 1.0);
        let rank = q * total;
        // Bucket counts can come out non-monotonic after merging or a partial
        // reset; treat each cumulative count as at least the one before it.
        let mut prev_bound = 0.0_f64;
        let mut prev_count = 0.0_f64;
        for (i, &(bound, raw)) in buckets.iter().enumerate() {
            let count = raw.max(prev_count);
            if count >= rank {
                if bound == f64::INFINITY {
                    // The answer lies above the largest finite bound: report that bound.
                    return Some(prev_bound);
                }
                if i == 0 && bound <= 0.0 {
                    return Some(bound);
                }
                let width = count - prev_count;
                let frac = if width > 0.0 {
                    (rank - prev_count) / width
                } else {
                    1.0
                };
                return Some(prev_bound + (bound - prev_bound) * frac);
            }
            prev_bound = bound;
            prev_count = count;
        }
        None
    }
}

/// The `q`-quantile in µs (q in 0..=1) of a log2 histogram (`slots[i]` counts values in
/// `[2^i, 2^(i+1))`, slot 0 `[0, 2)`), interpolated linearly inside its bucket. `None` when
/// empty.
#[must_use]
pub fn log2_quantile(slots: &[u64], q: f64) -> Option<f64> {
    let total: u64 = slots.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = (q.clamp(0.0, 1.0) * total as f64).max(1.0);
    let mut seen = 0.0;
    for (i, &n) in slots.iter().enumerate() {
        if n == 0 {
            continue;
        }
        let next = seen + n as f64;
        if next >= rank {
            let (lo, hi) = log2_bounds(i);
            return Some(lo + (hi - lo) * ((rank - seen) / n as f64));
        }
        seen = next;
    }
    let (_, hi) = log2_bounds(slots.len().saturating_sub(1));
    Some(hi)
}

/// Value range of log2 bucket `i`; bucket 0 is `[0, 2)`.
fn log2_bounds(i: usize) -> (f64, f64) {
    if i == 0 {
        (0.0, 2.0)
    } else {
        ((1u64 << i) as f64, (1u64 << (i + 1)) as f64)
    }
}

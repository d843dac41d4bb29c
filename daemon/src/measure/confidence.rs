//! How far a percentile of a sample can be trusted. A quantile `q` of `n` samples rests on the
//! `n (1 - q)` samples beyond it: the p99 of 20 requests is their largest. A percentile is a
//! number worth reading (and gating on) only with at least [`MIN_TAIL_SAMPLES`] beyond it — a
//! p50 needs 6 samples, a p95 60, a p99 300, a p99.9 3,000 — and then it carries a
//! distribution-free 95% interval: the order statistics around its rank, the count of samples
//! below the true quantile being binomial (`n`, `q`), taken in its normal approximation.

/// Fewest samples beyond a percentile for it to be reported as a number.
pub const MIN_TAIL_SAMPLES: f64 = 3.0;

/// The normal quantile of a two-sided 95% interval.
const Z95: f64 = 1.96;

/// The percentiles a summary reports: name and quantile.
pub const PERCENTILES: [(&str, f64); 5] = [
    ("p50", 0.5),
    ("p90", 0.9),
    ("p95", 0.95),
    ("p99", 0.99),
    ("p999", 0.999),
];

/// Samples quantile `q` needs: [`MIN_TAIL_SAMPLES`] beyond it.
#[must_use]
pub fn needed(q: f64) -> u64 {
    (MIN_TAIL_SAMPLES / (1.0 - q).max(1e-9)).round() as u64
}

/// Whether `n` samples are enough for quantile `q`.
#[must_use]
pub fn enough(q: f64, n: u64) -> bool {
    n >= needed(q)
}

/// The 95% interval of quantile `q` from `n` samples, as the two quantiles of the sample whose
/// values bound it (ranks `n q -/+ 1.96 sqrt(n q (1 - q))`, the upper one past its rank).
#[must_use]
pub fn interval(q: f64, n: u64) -> (f64, f64) {
    let n = n.max(1) as f64;
    let spread = Z95 * (n * q * (1.0 - q)).sqrt();
    let lo = (n * q - spread).floor().max(1.0);
    let hi = ((n * q + spread).ceil() + 1.0).min(n);
    (lo / n, hi / n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_percentile_needs_three_samples_beyond_it() {
        assert_eq!(needed(0.5), 6);
        assert_eq!(needed(0.95), 60);
        assert_eq!(needed(0.99), 300);
        assert_eq!(needed(0.999), 3000);
        assert!(!enough(0.99, 20));
        assert!(enough(0.99, 300));
    }

    #[test]
    fn the_interval_surrounds_the_rank_and_narrows_with_samples() {
        let (lo, hi) = interval(0.5, 100);
        assert!(lo < 0.5 && hi > 0.5, "{lo} {hi}");
        // 100 samples: ranks 40 .. 61.
        assert!(
            (lo - 0.40).abs() < 1e-9 && (hi - 0.61).abs() < 1e-9,
            "{lo} {hi}"
        );
        let (lo2, hi2) = interval(0.5, 10_000);
        assert!(hi2 - lo2 < hi - lo);
        // A p99 of 300: its upper end is the largest sample.
        assert!((interval(0.99, 300).1 - 1.0).abs() < 1e-9);
    }
}

//! Small exact statistics over the samples of one window.

use super::timeline::Quantiles;

/// The `q`-quantile (0..=1) of sorted `v` by linear interpolation; `None` when empty.
#[must_use]
pub fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let pos = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    Some(sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64))
}

/// The median of the finite values (mean of the middle two for an even count); `None` when
/// there are none.
#[must_use]
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    quantile(&v, 0.5)
}

/// p50/p95/p99/max of `v` (sorted in place); `None` when empty.
pub fn quantiles(v: &mut [f64]) -> Option<Quantiles> {
    v.sort_by(f64::total_cmp);
    Some(Quantiles {
        p50: quantile(v, 0.5)?,
        p95: quantile(v, 0.95)?,
        p99: quantile(v, 0.99)?,
        max: *v.last()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpolates_between_ranks() {
        let mut v = vec![4.0, 1.0, 3.0, 2.0];
        let q = quantiles(&mut v).unwrap();
        assert!((q.p50 - 2.5).abs() < 1e-9);
        assert!((q.max - 4.0).abs() < 1e-9);
        assert_eq!(quantile(&[], 0.5), None);
        assert_eq!(quantile(&[7.0], 0.99), Some(7.0));
        assert_eq!(median(&[4.0, f64::NAN, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[f64::INFINITY]), None);
    }
}

//! Quantiles of exact samples.

use std::ops::Range;

use super::{Quantile, Quantiles};

/// Samples sorted ascending, read with [`interpolated`] quantiles; its largest value is the
/// last one.
#[derive(Debug, Clone, Copy)]
pub struct Sorted<'a>(pub &'a [f64]);

impl Quantile for Sorted<'_> {
    fn quantile(&self, q: f64) -> Option<f64> {
        interpolated(self.0, q)
    }

    fn largest(&self) -> Option<f64> {
        self.0.last().copied()
    }
}

/// The `q`-quantile (0..=1) of `n` ranked values, `at(rank)` the value of 0-based `rank`, by
/// linear interpolation between the neighbouring ranks; `None` when `n` is 0. The one
/// interpolation [`interpolated`] and [`super::Sketch`] share.
pub(super) fn interpolate(n: u64, q: f64, at: impl Fn(u64) -> f64) -> Option<f64> {
    if n == 0 {
        return None;
    }
    let pos = q.clamp(0.0, 1.0) * (n - 1) as f64;
    let (lo, hi) = (pos.floor() as u64, pos.ceil() as u64);
    let (a, b) = (at(lo), at(hi));
    Some(a + (b - a) * (pos - lo as f64))
}

/// The `q`-quantile (0..=1) of sorted `v` by linear interpolation; `None` when empty.
#[must_use]
pub fn interpolated(sorted: &[f64], q: f64) -> Option<f64> {
    interpolate(sorted.len() as u64, q, |i| sorted[i as usize])
}

/// The sample of sorted `v` at the interpolated position of `q` (0..=1) rounded to the
/// nearest rank (`round((n - 1) q)`; for `q = 0.5` the upper of the two middle samples): an
/// actual sample, never a blend of two. `None` when empty. Not the textbook nearest-rank
/// method (`ceil(n q)`, the lower middle sample for an even count).
#[must_use]
pub fn rounded_rank(sorted: &[f64], q: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    sorted
        .get((last as f64 * q.clamp(0.0, 1.0)).round() as usize)
        .copied()
}

/// The textbook nearest-rank `q`-quantile of sorted `v`: the sample of rank `ceil(n q)`
/// (at least the first), the lower middle sample for `q = 0.5` and an even count. `None` when
/// empty.
#[must_use]
pub fn nearest_rank(sorted: &[f64], q: f64) -> Option<f64> {
    let n = sorted.len();
    let rank = ((q.clamp(0.0, 1.0) * n as f64).ceil() as usize).clamp(1, n.max(1));
    sorted.get(rank - 1).copied()
}

/// The ranks of `n` sorted samples from quantile `band.0` to quantile `band.1`: from
/// `floor(n band.0)` up to `ceil(n band.1)`, at least one rank when `n > 0`, empty when 0.
#[must_use]
pub fn band(n: usize, band: (f64, f64)) -> Range<usize> {
    let from = ((band.0 * n as f64).floor() as usize).min(n.saturating_sub(1));
    let to = ((band.1 * n as f64).ceil() as usize).clamp(from + 1, n.max(from + 1));
    from.min(n)..to.min(n)
}

/// The median of the finite values (mean of the middle two for an even count); `None` when
/// there are none.
#[must_use]
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    interpolated(&v, 0.5)
}

/// p50/p95/p99/max of `v` (sorted in place); `None` when empty.
pub fn quantiles(v: &mut [f64]) -> Option<Quantiles> {
    v.sort_by(f64::total_cmp);
    Sorted(v).quantiles()
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
        assert_eq!(interpolated(&[], 0.5), None);
        assert_eq!(interpolated(&[7.0], 0.99), Some(7.0));
        assert_eq!(median(&[4.0, f64::NAN, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[f64::INFINITY]), None);
    }

    #[test]
    fn rounded_rank_is_an_actual_sample_and_the_upper_middle_one() {
        for n in 1..=9usize {
            let v: Vec<f64> = (0..n).map(|i| i as f64).collect();
            assert_eq!(rounded_rank(&v, 0.5), Some(v[n / 2]), "n = {n}");
        }
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(rounded_rank(&v, 0.99), Some(4.0));
        assert_eq!(rounded_rank(&[], 0.5), None);
    }

    #[test]
    fn a_band_holds_at_least_one_rank() {
        assert_eq!(band(10, (0.4, 0.6)), 4..6);
        assert_eq!(band(1, (0.4, 0.6)), 0..1);
        assert_eq!(band(3, (0.99, 1.0)), 2..3);
        assert_eq!(band(0, (0.4, 0.6)), 0..0);
    }
}

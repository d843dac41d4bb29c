//! Quantiles of a stream of non-negative values in bounded memory: each value counts in a
//! log-spaced bucket 1% wide, so a quantile is within 0.5% of the exact one, and a window's
//! sketch holds a few hundred buckets however many requests or tokens it saw. The smallest and
//! largest values are kept exactly.

use std::collections::BTreeMap;

use super::{Quantile, exact::interpolate};

/// Bucket width: consecutive bucket centres are this factor apart.
const GAMMA: f64 = 1.01;

/// Counts of values by bucket.
#[derive(Debug, Clone, Default)]
pub struct Sketch {
    /// Values of zero (or below the smallest bucket).
    zeros: u64,
    /// Bucket `i` holds the values nearest `GAMMA^i`.
    buckets: BTreeMap<i32, u64>,
    count: u64,
    min: f64,
    max: f64,
}

impl Sketch {
    /// Counts `v` (a negative or non-finite value counts as zero).
    pub fn add(&mut self, v: f64) {
        let v = if v.is_finite() { v.max(0.0) } else { 0.0 };
        if self.count == 0 {
            (self.min, self.max) = (v, v);
        } else {
            self.min = self.min.min(v);
            self.max = self.max.max(v);
        }
        self.count += 1;
        if v < f64::MIN_POSITIVE {
            self.zeros += 1;
        } else {
            *self.buckets.entry(bucket(v)).or_default() += 1;
        }
    }

    /// Counts what `other` counted too.
    pub fn merge(&mut self, other: &Sketch) {
        if other.count == 0 {
            return;
        }
        if self.count == 0 {
            (self.min, self.max) = (other.min, other.max);
        } else {
            self.min = self.min.min(other.min);
            self.max = self.max.max(other.max);
        }
        self.count += other.count;
        self.zeros += other.zeros;
        for (i, n) in &other.buckets {
            *self.buckets.entry(*i).or_default() += n;
        }
    }

    /// Values counted.
    #[must_use]
    pub fn len(&self) -> u64 {
        self.count
    }

    /// Whether nothing was counted.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The value of 0-based rank `rank` (its bucket's centre, within the exact extremes).
    fn at_rank(&self, rank: u64) -> f64 {
        if rank == 0 {
            return self.min;
        }
        if rank + 1 >= self.count {
            return self.max;
        }
        let mut seen = self.zeros;
        if rank < seen {
            return 0.0;
        }
        for (&i, &n) in &self.buckets {
            seen += n;
            if rank < seen {
                return GAMMA.powi(i).clamp(self.min, self.max);
            }
        }
        self.max
    }
}

impl Quantile for Sketch {
    /// Interpolated between the neighbouring ranks as [`super::exact::interpolated`] does over
    /// exact samples.
    fn quantile(&self, q: f64) -> Option<f64> {
        interpolate(self.count, q, |rank| self.at_rank(rank))
    }

    /// The exact max.
    fn largest(&self) -> Option<f64> {
        (self.count > 0).then_some(self.max)
    }
}

/// The bucket of `v` > 0: the nearest power of [`GAMMA`].
fn bucket(v: f64) -> i32 {
    (v.ln() / GAMMA.ln()).round() as i32
}

#[cfg(test)]
mod tests {
    use super::super::exact;
    use super::*;

    #[test]
    fn quantiles_are_within_half_a_percent_of_the_exact_ones() {
        // A skewed stream: most values near 20, a tail up to 2,000, some zeros.
        let mut values: Vec<f64> = (0..20_000u32)
            .map(|i| {
                let x = f64::from(i * 7919 % 20_000) / 20_000.0;
                if i % 97 == 0 {
                    0.0
                } else {
                    20.0 / (1.0 - x).max(0.01)
                }
            })
            .collect();
        let mut s = Sketch::default();
        for &v in &values {
            s.add(v);
        }
        let exact = exact::quantiles(&mut values).unwrap();
        let got = s.quantiles().unwrap();
        for (name, e, g) in [
            ("p50", exact.p50, got.p50),
            ("p95", exact.p95, got.p95),
            ("p99", exact.p99, got.p99),
            ("max", exact.max, got.max),
        ] {
            assert!(
                (g - e).abs() <= e * 0.005 + 1e-9,
                "{name}: {g} vs exact {e}"
            );
        }
        assert_eq!(s.len(), 20_000);
    }

    #[test]
    fn few_values_are_exact_at_the_ends_and_bounded_in_memory() {
        let mut s = Sketch::default();
        assert_eq!(s.quantile(0.5), None);
        s.add(7.0);
        assert_eq!(s.quantile(0.99), Some(7.0));
        s.add(3.0);
        assert_eq!((s.quantile(0.0), s.quantile(1.0)), (Some(3.0), Some(7.0)));
        s.add(-1.0);
        s.add(f64::NAN);
        assert_eq!(s.quantile(0.0), Some(0.0));
        // A million values over six decades take at most a few thousand buckets.
        let mut big = Sketch::default();
        for i in 1..=1_000_000u32 {
            big.add(f64::from(i));
        }
        assert!(big.buckets.len() < 1500, "{}", big.buckets.len());
    }
}

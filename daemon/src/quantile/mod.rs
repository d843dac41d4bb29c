//! Quantiles, one home: the [`Quantile`] interface, every definition of a quantile the code
//! uses, and the one HDR histogram constructor ([`new_hist`]). A ground-floor module (see
//! `docs/design.md`): `measure`, `sim`, `scrape` and `collect` all read it.
//!
//! Which definition is used where:
//! - [`exact::Sorted`] / [`exact::interpolated`]: exact samples, linear interpolation between
//!   the neighbouring ranks. A window's samples (`collect`), medians of baselines and windows
//!   (`attribute`, `triggers`).
//! - [`Sketch`]: the same interpolated quantile over a bounded-memory stream (1%-wide log
//!   buckets, within 0.5% of the exact one): the load generator's records folded per window.
//! - [`exact::rounded_rank`]: the sample at the interpolated position rounded to the nearest
//!   rank, an actual sample and never a blend (for `q = 0.5`, the upper of the two middle
//!   ones): the steady state's equilibrium and the vector health's medians and p99.
//! - [`exact::nearest_rank`]: the textbook nearest rank (`ceil(n q)`): a request span's
//!   inter-token gaps (`gen_ai.itl.*`).
//! - [`exact::band`]: the ranks between two quantiles, for a band's mean (the decomposition's
//!   and `--confirm`'s median band).
//! - `hdrhistogram::Histogram<u64>` (from [`new_hist`]): reports' histograms, which merge
//!   exactly across runs and hosts.
//! - [`buckets::Cumulative`]: Prometheus cumulative buckets, like `histogram_quantile`.
//! - [`buckets::log2_quantile`]: the kernel's log2 run-queue histogram, linear inside a bucket.

pub mod buckets;
pub mod exact;
pub mod sketch;

use serde::{Deserialize, Serialize};

pub use buckets::new_hist;
pub use sketch::Sketch;

/// p50/p95/p99/max of one distribution in one window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Quantiles {
    /// Median.
    pub p50: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest value.
    pub max: f64,
}

/// A distribution quantiles can be read from.
pub trait Quantile {
    /// The `q`-quantile (`q` in 0..=1, clamped); `None` when empty.
    fn quantile(&self, q: f64) -> Option<f64>;

    /// The largest value; `None` when empty. By default the 1-quantile; a distribution that
    /// keeps its exact maximum returns that.
    fn largest(&self) -> Option<f64> {
        self.quantile(1.0)
    }

    /// p50/p95/p99 and the largest value; `None` when empty.
    fn quantiles(&self) -> Option<Quantiles> {
        Some(Quantiles {
            p50: self.quantile(0.5)?,
            p95: self.quantile(0.95)?,
            p99: self.quantile(0.99)?,
            max: self.largest()?,
        })
    }
}

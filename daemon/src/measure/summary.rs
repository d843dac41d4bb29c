//! Histograms as the reports keep them, and their percentile summaries.
//!
//! Histograms are serialized in the `HdrHistogram` V2 format, base64-encoded, so reports of
//! several runs (or several generator hosts) merge exactly: decode with [`decode_hist`],
//! `add` the histograms, take percentiles of the sum. Never average percentiles.

use std::collections::BTreeMap;

use base64::Engine as _;
use hdrhistogram::{
    Histogram,
    serialization::{Deserializer, Serializer as _, V2Serializer},
};
use serde::{Deserialize, Serialize};

use super::confidence::{PERCENTILES, enough, interval};
use crate::quantile::Quantile;

/// Encodes a histogram as base64 of its V2 serialization.
#[must_use]
pub fn encode_hist(h: &Histogram<u64>) -> String {
    let mut buf = Vec::new();
    V2Serializer::new()
        .serialize(h, &mut buf)
        .expect("writing to a Vec cannot fail");
    base64::engine::general_purpose::STANDARD.encode(buf)
}

/// Decodes [`encode_hist`]'s output.
pub fn decode_hist(s: &str) -> Result<Histogram<u64>, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_err(|e| format!("histogram is not base64: {e}"))?;
    Deserializer::new()
        .deserialize(&mut bytes.as_slice())
        .map_err(|e| format!("histogram is not HdrHistogram V2: {e:?}"))
}

/// Percentile summary in the unit named by the field holding it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Summary {
    /// Number of samples.
    pub count: u64,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Maximum.
    pub max: f64,
    /// The 95% interval of each percentile with enough samples beyond it, by name (`p50` ..
    /// `p999`; see `confidence.rs`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ci95: BTreeMap<String, [f64; 2]>,
    /// The percentiles with too few samples beyond them to say more than the largest few
    /// values did: shown as too few samples, never gated on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub too_few: Vec<String>,
}

impl Summary {
    /// Whether percentile `name` (`p50` .. `p999`) had too few samples to be a number.
    #[must_use]
    pub fn is_too_few(&self, name: &str) -> bool {
        self.too_few.iter().any(|n| n == name)
    }

    /// Percentile `name` (`p50` .. `p999`), `None` for another name.
    #[must_use]
    pub fn percentile(&self, name: &str) -> Option<f64> {
        Some(match name {
            "p50" => self.p50,
            "p90" => self.p90,
            "p95" => self.p95,
            "p99" => self.p99,
            "p999" => self.p999,
            _ => return None,
        })
    }
}

/// The summary of `h`, its values divided by `div`.
pub(crate) fn summarize(h: &Histogram<u64>, div: f64) -> Summary {
    if h.is_empty() {
        return Summary::default();
    }
    let q = |q: f64| h.quantile(q).map_or(0.0, |v| v / div);
    let n = h.len();
    let mut ci95 = BTreeMap::new();
    let mut too_few = Vec::new();
    for (name, p) in PERCENTILES {
        if enough(p, n) {
            let (lo, hi) = interval(p, n);
            ci95.insert(name.to_owned(), [q(lo), q(hi)]);
        } else {
            too_few.push(name.to_owned());
        }
    }
    Summary {
        count: n,
        mean: h.mean() / div,
        p50: q(0.5),
        p90: q(0.9),
        p95: q(0.95),
        p99: q(0.99),
        p999: q(0.999),
        max: h.max() as f64 / div,
        ci95,
        too_few,
    }
}

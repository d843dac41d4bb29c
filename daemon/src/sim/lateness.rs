//! The `fixed` profile's own truth: how late it sent each token against its schedule
//! (`arrival + ttft + i * itl`), exactly (µs histograms, not vLLM's coarse buckets), so that a
//! load generator's measurement error (client minus server) can be told from the server's own
//! lateness. Exported on `/metrics` as `inferscope_sim_*` summaries.

use std::{fmt::Write as _, time::Duration};

use hdrhistogram::Histogram;

use crate::quantile::{Quantile, new_hist};

/// Quantiles rendered for each summary.
const QUANTILES: [f64; 4] = [0.5, 0.9, 0.99, 0.999];

/// Lateness of first tokens and of later tokens, and the later tokens' actual gaps.
#[derive(Debug, Clone)]
pub struct Lateness {
    /// First token: sent minus `arrival + ttft`, µs.
    ttft: Histogram<u64>,
    /// Token `i >= 1`: sent minus `arrival + ttft + i * itl`, µs.
    itl: Histogram<u64>,
    /// Token `i >= 1`: sent minus the previous token's send, µs (the ITL the server produced).
    gap: Histogram<u64>,
}

impl Default for Lateness {
    fn default() -> Self {
        Self {
            ttft: new_hist(),
            itl: new_hist(),
            gap: new_hist(),
        }
    }
}

/// µs of `d`, at least 1 (an HDR histogram starts at 1; on time reads as 1 µs).
fn us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

impl Lateness {
    /// A first token sent `late` after its deadline.
    pub fn first(&mut self, late: Duration) {
        self.ttft.saturating_record(us(late));
    }

    /// A later token sent `late` after its deadline and `gap` after the token before it.
    pub fn later(&mut self, late: Duration, gap: Duration) {
        self.itl.saturating_record(us(late));
        self.gap.saturating_record(us(gap));
    }

    /// The exposition text (`labels` without braces, e.g. `model_name="m"`).
    #[must_use]
    pub fn render(&self, labels: &str) -> String {
        let mut o = String::new();
        for (name, help, h) in [
            (
                "inferscope_sim_ttft_lateness_seconds",
                "Fixed profile: first token sent minus its schedule (arrival + ttft), exact.",
                &self.ttft,
            ),
            (
                "inferscope_sim_itl_lateness_seconds",
                "Fixed profile: later token i sent minus its schedule (arrival + ttft + i * itl), exact.",
                &self.itl,
            ),
            (
                "inferscope_sim_itl_seconds",
                "Fixed profile: gap between a token and the one before it as sent, exact.",
                &self.gap,
            ),
        ] {
            summary(&mut o, name, help, labels, h);
        }
        o
    }
}

fn summary(o: &mut String, name: &str, help: &str, labels: &str, h: &Histogram<u64>) {
    let secs = |v: u64| v as f64 / 1e6;
    let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} summary");
    for q in QUANTILES {
        let v = h.quantile(q).map_or(f64::NAN, |us| us / 1e6);
        let _ = writeln!(o, "{name}{{{labels},quantile=\"{q}\"}} {v:?}");
    }
    let sum = h.mean() * h.len() as f64 / 1e6;
    let _ = writeln!(o, "{name}_sum{{{labels}}} {sum:?}");
    let _ = writeln!(o, "{name}_count{{{labels}}} {}", h.len());
    let max = format!("{name}_max");
    super::exposition::gauge(
        o,
        &max,
        "Largest value of the summary of the same name.",
        labels,
        secs(h.max()),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::exposition::sample;

    fn quantile(text: &str, name: &str, q: &str) -> f64 {
        let key = format!("{name}{{model_name=\"m\",quantile=\"{q}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&key))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {key} in\n{text}"))
    }

    #[test]
    fn exact_quantiles_of_first_and_later_tokens_apart() {
        let mut l = Lateness::default();
        for i in 0..100u64 {
            l.first(Duration::from_micros(100 + i));
        }
        for i in 0..1000u64 {
            // One token in a hundred 3 ms late, the rest 200 µs.
            let late = if i % 100 == 99 { 3000 } else { 200 };
            l.later(
                Duration::from_micros(late),
                Duration::from_micros(10_000 + late),
            );
        }
        let t = l.render("model_name=\"m\"");
        assert!(t.contains("# TYPE inferscope_sim_ttft_lateness_seconds summary"));
        let p50 = quantile(&t, "inferscope_sim_ttft_lateness_seconds", "0.5");
        assert!((p50 - 150e-6).abs() < 1e-6, "{p50}");
        assert_eq!(
            sample(&t, "inferscope_sim_ttft_lateness_seconds_count"),
            Some(100.0)
        );
        // The ITL p99 sits between the 200 µs and the 3 ms tokens; the max is the 3 ms one:
        // finer than any vLLM bucket (10, 25, 50 ms).
        let p99 = quantile(&t, "inferscope_sim_itl_lateness_seconds", "0.99");
        assert!((p99 - 200e-6).abs() < 1e-6, "{p99}");
        let p999 = quantile(&t, "inferscope_sim_itl_lateness_seconds", "0.999");
        assert!((p999 - 3e-3).abs() < 1e-5, "{p999}");
        let max = sample(&t, "inferscope_sim_itl_lateness_seconds_max").unwrap();
        assert!((max - 3e-3).abs() < 1e-5, "{max}");
        let gap = quantile(&t, "inferscope_sim_itl_seconds", "0.5");
        assert!((gap - 10.2e-3).abs() < 2e-5, "{gap}");
    }

    #[test]
    fn empty_summaries_render_nan_quantiles_and_zero_counts() {
        let t = Lateness::default().render("model_name=\"m\"");
        assert!(quantile(&t, "inferscope_sim_itl_seconds", "0.99").is_nan());
        assert_eq!(sample(&t, "inferscope_sim_itl_seconds_count"), Some(0.0));
    }
}

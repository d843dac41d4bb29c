//! Reading the tools' output: bpftrace's histograms in inferscope's buckets, their quantiles,
//! and the summary line of `inferscope runqlat`.

/// `[1] N processes, M samples: p50 X us, p99 Y us, ...` -> the number before/after `key`.
pub(super) fn summary_field(text: &str, key: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.starts_with("[1]"))?;
    let words: Vec<&str> = line
        .split([' ', ',', ':'])
        .filter(|w| !w.is_empty())
        .collect();
    let i = words.iter().position(|w| *w == key)?;
    if key == "samples" {
        words.get(i - 1)?.parse().ok()
    } else {
        words.get(i + 1)?.parse().ok()
    }
}

/// bpftrace hist lines `[lo, hi)  count |@@@|` (and `[0]`, `[1]`) -> (lo, hi, count).
pub(super) fn parse_bpftrace_hist(text: &str) -> Vec<(f64, f64, f64)> {
    let unit = |s: &str| -> Option<f64> {
        let s = s.trim();
        let (num, mul) = match s.chars().last()? {
            'K' => (&s[..s.len() - 1], 1024.0),
            'M' => (&s[..s.len() - 1], 1024.0 * 1024.0),
            _ => (s, 1.0),
        };
        Some(num.parse::<f64>().ok()? * mul)
    };
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            let (range, rest) = l
                .strip_prefix('[')?
                .split_once(']')
                .or_else(|| l.strip_prefix('[')?.split_once(')'))?;
            let count: f64 = rest.split_whitespace().next()?.parse().ok()?;
            if let Some((lo, hi)) = range.split_once(',') {
                Some((unit(lo)?, unit(hi)?, count))
            } else {
                let v = unit(range)?;
                Some((v, v + 1.0, count))
            }
        })
        .collect()
}

/// bpftrace's buckets in inferscope's layout: its `[0]` and `[1]` are inferscope's first bucket,
/// `[0, 2)` us; the rest are the same log2 buckets. Quantiles of the two tools are then read
/// from the same buckets the same way: at 1-2 us a bucket is 100% wide, and two layouts alone
/// put p50s 70% apart.
pub(super) fn inferscope_buckets(h: Vec<(f64, f64, f64)>) -> Vec<(f64, f64, f64)> {
    let low: f64 = h.iter().filter(|b| b.1 <= 2.0).map(|b| b.2).sum();
    std::iter::once((0.0, 2.0, low))
        .chain(h.into_iter().filter(|b| b.1 > 2.0))
        .collect()
}

/// Quantile of a bucketed histogram, interpolated linearly inside the bucket (as inferscope does).
pub(super) fn log2_quantile(h: &[(f64, f64, f64)], q: f64) -> f64 {
    let total: f64 = h.iter().map(|b| b.2).sum();
    let rank = (q * total).max(1.0);
    let mut seen = 0.0;
    for &(lo, hi, n) in h {
        if n > 0.0 && seen + n >= rank {
            return lo + (hi - lo) * ((rank - seen) / n);
        }
        seen += n;
    }
    f64::NAN
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_bpftrace_histograms() {
        let text = "@usecs:\n[0]                    3 |@@@|\n[1]                    1 |@|\n[2, 4)                 4 |@@@@|\n[4, 8)                 2 |@@|\n[1K, 2K)               1 |@|\n";
        let h = parse_bpftrace_hist(text);
        assert_eq!(h.len(), 5);
        assert_eq!(h[2], (2.0, 4.0, 4.0));
        assert_eq!(h[4], (1024.0, 2048.0, 1.0));
        let p50 = log2_quantile(&h, 0.5);
        assert!((2.0..4.0).contains(&p50), "{p50}");
        let merged = inferscope_buckets(h);
        assert_eq!(merged[0], (0.0, 2.0, 4.0));
        assert_eq!(merged[1], (2.0, 4.0, 4.0));
        assert_eq!(merged.len(), 4);
    }

    #[test]
    fn reads_runqlat_summary() {
        let t =
            "Tracing...\n[1] 12 processes, 4521 samples: p50 3.2 us, p99 120.4 us, mean 9.1 us\n";
        assert_eq!(summary_field(t, "samples"), Some(4521.0));
        assert_eq!(summary_field(t, "p99"), Some(120.4));
    }
}

//! The terminal lines of the joint view: per vector phase recall beside P99/P999, recall
//! per latency band, low-recall latency, index health; per sweep the recall/latency frontier.

use std::fmt::Write as _;

use super::fmt_ms;
use crate::measure::{report::PhaseReport, vector_health::VectorView};

/// The joint view and index health lines of one phase.
pub fn lines(s: &mut String, p: &PhaseReport, v: &VectorView) {
    let j = &v.joint;
    if j.sampled > 0 {
        let e2e = p.latency_ms.get("e2e").cloned().unwrap_or_default();
        let bands: Vec<String> = j
            .by_latency
            .iter()
            .filter(|b| b.queries > 0)
            .map(|b| {
                format!(
                    "{} {:.3} ({})",
                    b.band,
                    b.recall_mean.unwrap_or_default(),
                    b.queries
                )
            })
            .collect();
        let _ = writeln!(
            s,
            "  recall x latency: recall {:.3} with e2e p99 {} p999 {}; recall by latency {}",
            p.recall.mean,
            fmt_ms(e2e.p99),
            fmt_ms(e2e.p999),
            bands.join(", ")
        );
        let low = &j.low_recall;
        if low.queries > 0 {
            let _ = writeln!(
                s,
                "  recall below {:.2}: {} of {} sampled queries, e2e p50 {} p99 {} max {}",
                low.below,
                low.queries,
                j.sampled,
                fmt_ms(low.e2e_p50_ms.unwrap_or_default()),
                fmt_ms(low.e2e_p99_ms.unwrap_or_default()),
                fmt_ms(low.e2e_max_ms.unwrap_or_default())
            );
        }
    }
    if j.dropped > 0 {
        let _ = writeln!(
            s,
            "  recall: {} samples dropped (the ground-truth thread was behind: lower recall_sample or the corpus)",
            j.dropped
        );
    }
    if !v.spikes.is_empty() {
        let at: Vec<String> = v
            .spikes
            .iter()
            .map(|x| format!("{}s {}", x.start_s, fmt_ms(x.e2e_mean_ms)))
            .collect();
        let _ = writeln!(
            s,
            "  latency spikes (e2e mean per second, usual {}): {}: an index rebuild or compaction looks like this",
            fmt_ms(v.e2e_median_second_ms.unwrap_or_default()),
            at.join(", ")
        );
    }
    if let Some(h) = &v.health {
        let first = h.windows.first().map_or(0.0, |w| w.recall_mean);
        let last = h.windows.last().map_or(0.0, |w| w.recall_mean);
        let advice = if h.rebuild_advised {
            format!(
                ": below {:.0}%, rebuild the index (or raise ef_search)",
                h.rebuild_below * 100.0
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            "  index health: recall {first:.3} -> {last:.3} over {} windows of {}s (change {:+.3}), lowest {:.3} at {}s{advice}",
            h.windows.len(),
            h.window_s,
            -h.drift,
            h.min_window_recall,
            h.min_window_start_s
        );
    }
}

/// One step of a sweep on the frontier: no other step has at least its recall at no more
/// than its P99 (and is better in one).
fn on_frontier(points: &[(f64, f64)], i: usize) -> bool {
    let (r, l) = points[i];
    !points
        .iter()
        .enumerate()
        .any(|(j, &(r2, l2))| j != i && r2 >= r && l2 <= l && (r2 > r || l2 < l))
}

/// The recall/latency frontier of every `sweep:`.
pub fn frontiers(s: &mut String, phases: &[PhaseReport]) {
    let mut seen: Vec<&str> = Vec::new();
    for p in phases {
        let Some(base) = p.vector.as_ref().and_then(|v| v.sweep_of.as_deref()) else {
            continue;
        };
        if seen.contains(&base) {
            continue;
        }
        seen.push(base);
        let steps: Vec<&PhaseReport> = phases
            .iter()
            .filter(|q| q.vector.as_ref().and_then(|v| v.sweep_of.as_deref()) == Some(base))
            .collect();
        let e2e = |q: &PhaseReport| q.latency_ms.get("e2e").cloned().unwrap_or_default();
        let points: Vec<(f64, f64)> = steps.iter().map(|q| (q.recall.mean, e2e(q).p99)).collect();
        let _ = writeln!(s, "ef_search sweep of `{base}`: recall/latency frontier");
        let _ = writeln!(
            s,
            "  {:>9} {:>8} {:>9} {:>9} {:>9} {:>8} frontier",
            "ef_search", "recall", "e2e p50", "e2e p99", "e2e p999", "req/s"
        );
        for (i, q) in steps.iter().enumerate() {
            let l = e2e(q);
            let ef = q
                .vector
                .as_ref()
                .and_then(|v| v.ef_search)
                .map_or_else(|| "-".into(), |e| e.to_string());
            let recall = if q.recall.count > 0 {
                format!("{:.3}", q.recall.mean)
            } else {
                "-".into()
            };
            let _ = writeln!(
                s,
                "  {ef:>9} {recall:>8} {:>9} {:>9} {:>9} {:>8.1} {}",
                fmt_ms(l.p50),
                fmt_ms(l.p99),
                fmt_ms(l.p999),
                q.requests_per_s,
                if q.recall.count > 0 && on_frontier(&points, i) {
                    "*"
                } else {
                    ""
                }
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frontier_keeps_undominated_steps() {
        let pts = [(0.80, 1.0), (0.90, 2.0), (0.89, 3.0), (0.99, 5.0)];
        let on: Vec<bool> = (0..pts.len()).map(|i| on_frontier(&pts, i)).collect();
        assert_eq!(on, [true, true, false, true]);
    }
}

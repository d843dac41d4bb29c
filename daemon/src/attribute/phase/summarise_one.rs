//! One phase's summary from its windows and their verdicts.

use super::dominant::dominant;
use super::measures::{latency, load};
use super::onset::onset;
use super::summary::{CauseShare, PhaseSummary};
use crate::attribute::WindowVerdict;
use crate::attribute::baseline::{Baseline, Baselines};
use crate::attribute::causes;
use crate::attribute::decompose::{self, Decomposition, MEDIAN_BAND, TAIL_BAND};
use crate::attribute::lag::Lag;
use crate::attribute::missing;
use crate::attribute::verdict::Cause;
use crate::collect::timeline::Window;

/// By how many windows `dominant` won over the next cause (all of them when it named none).
fn margin(shares: &[CauseShare], dominant: Cause) -> usize {
    let windows = |mine: bool| {
        shares
            .iter()
            .filter(|s| (s.cause == dominant) == mine)
            .map(|s| s.windows)
            .max()
            .unwrap_or(0)
    };
    windows(true).saturating_sub(windows(false))
}

/// One phase (`drain`: the windows after its last send) of the windows `idx`.
pub(super) fn summarise_one(
    name: String,
    idx: &[usize],
    drain: bool,
    windows: &[Window],
    verdicts: &[WindowVerdict],
    baselines: &Baselines,
    admission_cap: Option<f64>,
) -> PhaseSummary {
    let n = idx.len();
    let mut shares: Vec<CauseShare> = Cause::ALL
        .iter()
        .map(|&cause| {
            let k = idx
                .iter()
                .filter(|&&i| verdicts[i].verdict.cause == cause)
                .count();
            CauseShare {
                cause,
                windows: k,
                share: k as f64 / n.max(1) as f64,
            }
        })
        .filter(|s| s.windows > 0)
        .collect();
    shares.sort_by_key(|s| std::cmp::Reverse(s.windows));
    let phase_windows: Vec<&Window> = idx.iter().map(|&i| &windows[i]).collect();
    let phase_latency = latency(&phase_windows);
    let is_baseline = idx.iter().all(|&i| baselines.contains(i));
    let base = idx.first().and_then(|&i| baselines.for_window(&windows[i]));
    let dominant = dominant(&shares, is_baseline, base, &phase_latency);
    let of_dominant: Vec<&WindowVerdict> = idx
        .iter()
        .map(|&i| &verdicts[i])
        .filter(|v| v.verdict.cause == dominant)
        .collect();
    let confidence = mean_confidence(&of_dominant);
    // The evidence of the most confident window.
    let evidence = of_dominant
        .iter()
        .max_by(|a, b| a.verdict.confidence.total_cmp(&b.verdict.confidence))
        .map(|v| v.verdict.evidence.clone())
        .unwrap_or_default();
    let runners_up = causes::runners_up(&of_dominant);
    let missing = missing::groups(idx.iter().flat_map(|&i| verdicts[i].verdict.missing.iter()));
    let by_design = missing::ByDesign {
        recognised_engine: phase_windows
            .iter()
            .any(|w| w.server.as_ref().is_some_and(|s| !s.engine.is_unknown())),
        drain,
    };
    let missing_decisive = missing::decisive(&missing, n, margin(&shares, dominant), by_design);
    let missing: Vec<String> = missing.iter().map(|g| g.line(n)).collect();
    let (came_first, hint) = onset(dominant, idx, windows, verdicts, admission_cap);
    let lag = Lag::of(idx, windows, verdicts);
    let untrustworthy = lag.as_ref().is_some_and(Lag::untrustworthy);
    let (decomposition, tail_decomposition) = base
        .filter(|_| !is_baseline)
        .map(|base| decompositions(idx, windows, base))
        .unwrap_or_default();
    let won: Vec<Cause> = shares.iter().map(|s| s.cause).collect();
    let named = causes::named(
        dominant,
        &causes::candidates(dominant, &runners_up, &won),
        &[decomposition.as_ref(), tail_decomposition.as_ref()],
    );
    PhaseSummary {
        start_unix_ms: phase_windows.first().map_or(0, |w| w.start_unix_ms),
        end_unix_ms: phase_windows
            .last()
            .map_or(0, |w| w.start_unix_ms + w.len_ms),
        windows: n,
        load: load(&phase_windows),
        latency: phase_latency,
        shares,
        dominant,
        confidence,
        evidence,
        hint,
        came_first,
        untrustworthy,
        lag,
        causes: named,
        runners_up,
        decomposition,
        tail_decomposition,
        missing,
        missing_decisive,
        marks: Vec::new(),
        confirmation: None,
        hops: None,
        drain,
        saturated: None,
        overload: None,
        notes: Vec::new(),
        energy: None,
        bound: None,
        prefix: None,
        name,
    }
}

/// Where the median's and the tail's rise over `base` went: per request when the windows carry
/// their requests, the median from window medians otherwise.
fn decompositions(
    idx: &[usize],
    windows: &[Window],
    base: &Baseline,
) -> (Option<Decomposition>, Option<Decomposition>) {
    (
        decompose::by_requests(idx, windows, base, "p50", MEDIAN_BAND)
            .or_else(|| decompose::by_windows(idx, windows, base)),
        decompose::by_requests(idx, windows, base, "p95", TAIL_BAND),
    )
}

/// The mean confidence of `verdicts` (0 when there are none).
fn mean_confidence(verdicts: &[&WindowVerdict]) -> f64 {
    if verdicts.is_empty() {
        return 0.0;
    }
    verdicts.iter().map(|v| v.verdict.confidence).sum::<f64>() / verdicts.len() as f64
}

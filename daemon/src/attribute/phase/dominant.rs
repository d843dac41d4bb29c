//! A phase's verdict from its windows' shares, and whether the phase's latency rose as a whole.

use super::summary::{CauseShare, DOMINANT_MIN_SHARE, MIN_CAUSE_WINDOWS, PhaseLatency};
use crate::attribute::baseline::Baseline;
use crate::attribute::evaluate::{MEDIAN_RISE_MS, MEDIAN_RISE_RATIO};
use crate::attribute::signals::Signal;
use crate::attribute::verdict::Cause;
use crate::collect::timeline::Quantiles;

/// The phase's verdict from its windows' `shares` (most windows first). A lagging generator
/// makes every other verdict of the phase suspect, so it leads; a named cause comes before
/// `unexplained`, which comes before `none`. A cause of fewer windows still explains the phase
/// when the phase's tail rose: a spike of a few windows (a rebuild, a burst of loss) is what a
/// phase's p99 shows and a window share hides.
pub(super) fn dominant(
    shares: &[CauseShare],
    is_baseline: bool,
    base: Option<&Baseline>,
    phase_latency: &PhaseLatency,
) -> Cause {
    let named = |c: Cause| !matches!(c, Cause::None | Cause::Unexplained);
    let least = MIN_CAUSE_WINDOWS.min(shares.iter().map(|s| s.windows).sum());
    // The causes of enough of the phase's windows, most windows first.
    let holding: Vec<Cause> = shares
        .iter()
        .filter(|s| s.share >= DOMINANT_MIN_SHARE && s.windows >= least)
        .map(|s| s.cause)
        .collect();
    if holding.contains(&Cause::Loadgen) {
        return Cause::Loadgen;
    }
    holding
        .iter()
        .copied()
        .find(|&c| named(c))
        .or_else(|| {
            // Not in a baseline phase: it is the reference its own tail is judged by.
            shares
                .iter()
                .find(|s| named(s.cause))
                .filter(|s| s.windows >= MIN_CAUSE_WINDOWS)
                .filter(|_| !is_baseline && base.is_some_and(|b| tail_rose(phase_latency, b)))
                .map(|s| s.cause)
        })
        .or_else(|| {
            // Windows of a request or two rise by chance on a machine whose speed drifts:
            // the phase's rise is unexplained only when the phase as a whole rose. The
            // baseline phase is the reference those rises are measured from: its own windows
            // above its median are its noise (a few exchanges a window make a bimodal median),
            // never a rise; a baseline that is itself the problem is named by what is full.
            (holding.contains(&Cause::Unexplained)
                && base.is_none_or(|b| !is_baseline && rose(phase_latency, b)))
            .then_some(Cause::Unexplained)
        })
        .unwrap_or(Cause::None)
}

/// Whether the phase's p99 (TTFT, else E2E; request-weighted over its windows) is at least
/// twice the baseline windows' median p99 and beyond their noise.
fn tail_rose(latency: &PhaseLatency, base: &Baseline) -> bool {
    let check = |q: Option<Quantiles>, s: Signal| {
        let (q, level) = (q?, base.level(s)?);
        Some(q.p99 >= level.risen_bar(2.0, 0.0))
    };
    check(latency.ttft_ms, Signal::TtftP99Ms)
        .or_else(|| check(latency.e2e_ms, Signal::E2eP99Ms))
        .unwrap_or(false)
}

/// Whether the phase's latency rose as a window's must to be off its baseline: its TTFT or
/// E2E median x1.5 and +20 ms beyond the baseline's noise, or its tail ([`tail_rose`]). A
/// phase without client latencies (the server's side only) cannot say, and counts as risen.
fn rose(latency: &PhaseLatency, base: &Baseline) -> bool {
    let check = |q: Option<Quantiles>, s: Signal| {
        let (q, level) = (q?, base.level(s)?);
        Some(q.p50 >= level.risen_bar(MEDIAN_RISE_RATIO, MEDIAN_RISE_MS))
    };
    let medians = [
        check(latency.ttft_ms, Signal::TtftP50Ms),
        check(latency.e2e_ms, Signal::E2eP50Ms),
    ];
    medians.iter().all(Option::is_none) || medians.contains(&Some(true)) || tail_rose(latency, base)
}

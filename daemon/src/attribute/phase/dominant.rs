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

/// Whether the phase's p99 of what a client waits for, its first token or its whole answer
/// (request-weighted over its windows), is at least twice the baseline windows' median p99 and
/// beyond their noise. Either counts: a stall after the first token (a lost segment of the
/// stream, a preempted sequence) leaves TTFT where it was and doubles the answer's tail.
fn tail_rose(latency: &PhaseLatency, base: &Baseline) -> bool {
    let check = |q: Option<Quantiles>, s: Signal| {
        let (q, level) = (q?, base.level(s)?);
        Some(q.p99 >= level.risen_bar(2.0, 0.0))
    };
    check(latency.ttft_ms, Signal::TtftP99Ms) == Some(true)
        || check(latency.e2e_ms, Signal::E2eP99Ms) == Some(true)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribute::baseline::Workload;
    use crate::attribute::tests::q;
    use crate::collect::timeline::{LoadSignals, Timeline, Window};

    /// Eight baseline windows of a stream: TTFT p99 ~10 ms, E2E p99 ~190 ms.
    fn baseline() -> Baseline {
        let mut t = Timeline::new(0, 1000);
        for i in 0..8u32 {
            let jitter = 1.0 + 0.03 * f64::from(i % 3);
            t.windows.push(Window {
                start_unix_ms: u64::from(i) * 1000,
                len_ms: 1000,
                phase: Some("baseline".to_owned()),
                load: Some(LoadSignals {
                    requests: 4,
                    ttft_ms: Some(q(6.5, 10.0 * jitter)),
                    e2e_ms: Some(q(152.0, 190.0 * jitter)),
                    endpoint: Some(crate::loadgen::Endpoint::Chat),
                    ..LoadSignals::default()
                }),
                ..Window::default()
            });
        }
        Baseline::of(&t, Workload::Llm).unwrap()
    }

    fn shares(network: usize, none: usize) -> Vec<CauseShare> {
        let n = (network + none) as f64;
        vec![
            CauseShare {
                cause: Cause::None,
                windows: none,
                share: none as f64 / n,
            },
            CauseShare {
                cause: Cause::Network,
                windows: network,
                share: network as f64 / n,
            },
        ]
    }

    /// Loss on the server's segments: two windows of ten hold a request that waited for a
    /// retransmission mid-stream. Its first token came on time; its answer took 3.5x longer.
    #[test]
    fn a_stall_after_the_first_token_is_a_tail_that_rose() {
        let stalled = PhaseLatency {
            exact: true,
            ttft_ms: Some(q(6.6, 11.6)),
            itl_ms: None,
            e2e_ms: Some(q(158.0, 671.0)),
        };
        let got = dominant(&shares(2, 8), false, Some(&baseline()), &stalled);
        assert_eq!(got, Cause::Network);
    }

    /// The same two windows in a phase whose first tokens and answers kept their baseline's
    /// tail: chance, not the phase's cause.
    #[test]
    fn a_minority_cause_without_a_risen_tail_is_none() {
        let flat = PhaseLatency {
            exact: true,
            ttft_ms: Some(q(6.6, 11.6)),
            itl_ms: None,
            e2e_ms: Some(q(158.0, 230.0)),
        };
        let got = dominant(&shares(2, 8), false, Some(&baseline()), &flat);
        assert_eq!(got, Cause::None);
    }
}

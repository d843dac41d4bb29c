//! Which causes a phase names: the runners-up of its dominant verdict over the windows it won,
//! and a second cause when two each explain a large part of the latency rise.

use serde::{Deserialize, Serialize};

use super::WindowVerdict;
use super::decompose::Decomposition;
use super::rank::MIN_CONFIDENCE;
use super::verdict::{Cause, CauseScore};

/// Least part of the rise each of two causes must explain for a phase to name both.
pub const SECOND_CAUSE_MIN_PART: f64 = 0.3;

/// A cause named for a phase and the part of the latency rise it explains.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CausePart {
    /// The cause.
    pub cause: Cause,
    /// Its part of the rise, 0..1: the decomposition's parts the cause acts through.
    pub part: f64,
    /// The decomposition it was read from (`p50` or `p95`).
    pub quantile: String,
}

/// The runners-up of the dominant verdict over the windows it won (`won`): each cause's mean
/// rank over those windows (0 where it did not score), best first. Each window's winner ranks
/// at least as high as its runners-up, so the phase's mean confidence does too. A cause is
/// `explained_by` the dominant one when it was in at least half of those windows.
#[must_use]
pub fn runners_up(won: &[&WindowVerdict]) -> Vec<CauseScore> {
    let n = won.len().max(1) as f64;
    let mut out: Vec<(CauseScore, usize)> = Vec::new();
    for r in won.iter().flat_map(|v| &v.verdict.runners_up) {
        let i = out
            .iter()
            .position(|(c, _)| c.cause == r.cause)
            .unwrap_or_else(|| {
                out.push((
                    CauseScore {
                        cause: r.cause,
                        score: 0.0,
                        confidence: 0.0,
                        explained_by: None,
                    },
                    0,
                ));
                out.len() - 1
            });
        let (c, explained) = &mut out[i];
        c.score += r.score / n;
        c.confidence += r.confidence / n;
        if r.explained_by.is_some() {
            *explained += 1;
            c.explained_by = r.explained_by;
        }
    }
    let mut out: Vec<CauseScore> = out
        .into_iter()
        .map(|(mut c, explained)| {
            if 2 * explained < won.len() {
                c.explained_by = None;
            }
            c
        })
        .collect();
    out.sort_by(|a, b| b.confidence.total_cmp(&a.confidence));
    out
}

/// Whether `c` acts inside the server: through its queue and compute time.
fn in_server(c: Cause) -> bool {
    matches!(
        c,
        Cause::KvCache
            | Cause::DuplicatePrefill
            | Cause::GpuMemory
            | Cause::GpuThrottle
            | Cause::Queue
            | Cause::Compute
            | Cause::VectorIndex
    )
}

/// The part of `d`'s rise `cause` acts through, 0..1: the server's time for the causes inside
/// it, the transit for `network`, the run-queue wait for `cpu_runqueue`, the send lag for
/// `loadgen`; `None` for causes no part measures.
fn part(cause: Cause, d: &Decomposition) -> Option<f64> {
    let ms = match cause {
        c if in_server(c) => d.queue_ms.unwrap_or(0.0) + d.server_compute_ms.unwrap_or(0.0),
        Cause::Network => d.network_ms?,
        Cause::CpuRunqueue => d.cpu_scheduling_ms?,
        Cause::Loadgen => d.loadgen_lag_ms?,
        _ => return None,
    };
    (d.increase_ms > 0.0).then(|| (ms / d.increase_ms).clamp(0.0, 1.0))
}

/// Whether two causes act through the same part of the decomposition (one cannot be told from
/// the other there).
fn same_part(a: Cause, b: Cause) -> bool {
    a == b || (in_server(a) && in_server(b))
}

/// The causes a phase names with their parts of the rise: the dominant one, and a second one
/// (a convincing runner-up not explained by the dominant, or another cause that won windows)
/// when it explains at least [`SECOND_CAUSE_MIN_PART`] of the rise in the same decomposition
/// (the median's first, then the tail's), whatever the dominant's own part: the dominant won
/// the windows, the second holds the rise. Empty without a decomposition or when the dominant
/// cause is no part of it.
#[must_use]
pub fn named(
    dominant: Cause,
    candidates: &[Cause],
    decompositions: &[Option<&Decomposition>],
) -> Vec<CausePart> {
    let mut first = None;
    for d in decompositions.iter().flatten() {
        let quantile = d.band.as_ref().map_or("p50", |b| b.quantile.as_str());
        let Some(p) = part(dominant, d) else {
            continue;
        };
        let lead = CausePart {
            cause: dominant,
            part: p,
            quantile: quantile.to_owned(),
        };
        let second = candidates
            .iter()
            .filter(|&&c| !same_part(c, dominant))
            .filter_map(|&c| Some((c, part(c, d)?)))
            .filter(|&(_, p)| p >= SECOND_CAUSE_MIN_PART)
            .max_by(|a, b| a.1.total_cmp(&b.1));
        match second {
            Some((cause, p2)) => {
                return vec![
                    lead,
                    CausePart {
                        cause,
                        part: p2,
                        quantile: quantile.to_owned(),
                    },
                ];
            }
            _ => {
                first.get_or_insert(lead);
            }
        }
    }
    first.into_iter().collect()
}

/// The causes that may be named beside `dominant`: convincing runners-up it does not explain,
/// and the other named causes that won windows.
#[must_use]
pub fn candidates(dominant: Cause, runners_up: &[CauseScore], won: &[Cause]) -> Vec<Cause> {
    let mut out: Vec<Cause> = runners_up
        .iter()
        .filter(|r| r.confidence >= MIN_CONFIDENCE && r.explained_by.is_none())
        .map(|r| r.cause)
        .collect();
    for &c in won {
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out.retain(|&c| c != dominant && !matches!(c, Cause::None | Cause::Unexplained));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rise of 1,000 ms: `network_ms` in transit, the rest in the server.
    fn rise(network_ms: f64) -> Decomposition {
        Decomposition {
            increase_ms: 1000.0,
            network_ms: Some(network_ms),
            queue_ms: Some(300.0),
            server_compute_ms: Some(700.0 - network_ms),
            ..Decomposition::default()
        }
    }

    fn names(dominant: Cause, d: &Decomposition) -> Vec<(Cause, u32)> {
        named(dominant, &[Cause::KvCache], &[Some(d)])
            .iter()
            .map(|c| (c.cause, (c.part * 100.0).round() as u32))
            .collect()
    }

    #[test]
    fn a_second_cause_holding_the_rise_is_named_even_beside_a_small_dominant() {
        // Both hold a large part.
        assert_eq!(
            names(Cause::Network, &rise(350.0)),
            [(Cause::Network, 35), (Cause::KvCache, 65)]
        );
        // The dominant won the windows, the runner-up holds the rise: both, the dominant first.
        assert_eq!(
            names(Cause::Network, &rise(130.0)),
            [(Cause::Network, 13), (Cause::KvCache, 87)]
        );
        // A second cause acting through the same part as the dominant is not named.
        assert_eq!(names(Cause::Queue, &rise(130.0)), [(Cause::Queue, 87)]);
    }
}

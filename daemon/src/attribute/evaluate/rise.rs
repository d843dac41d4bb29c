//! Whether a window's latency rose beyond the baseline's noise: the client's, else the server
//! side the kernel saw.

use crate::attribute::baseline::Ctx;
use crate::attribute::rules::{Condition, Outcome, Role, Test};
use crate::attribute::signals::Signal;
use crate::attribute::verdict::Evidence;

/// The latency signals that rose beyond the baseline's noise: the client's when the window has
/// them, else the server side the kernel saw; `None` when neither could be evaluated.
pub(super) fn latency_rise(ctx: &Ctx<'_>) -> Option<Vec<Evidence>> {
    [&LATENCY_RISE[..], &SERVER_LATENCY_RISE[..]]
        .into_iter()
        .find_map(|list| {
            let outcomes: Vec<Outcome> = list.iter().map(|c| c.evaluate(ctx)).collect();
            outcomes
                .iter()
                .any(|o| matches!(o, Outcome::Evaluated(_)))
                .then(|| {
                    outcomes
                        .into_iter()
                        .filter_map(|o| match o {
                            Outcome::Evaluated(e) if e.met => Some(e),
                            Outcome::Evaluated(_) | Outcome::Missing(_) | Outcome::Inapplicable => {
                                None
                            }
                        })
                        .collect()
                })
        })
}

/// Factor over the baseline a latency median must reach to have risen ([`LATENCY_RISE`]).
pub const MEDIAN_RISE_RATIO: f64 = 1.5;
/// Least rise of a latency median, ms ([`LATENCY_RISE`]).
pub const MEDIAN_RISE_MS: f64 = 20.0;

/// Latency signals whose rise beyond the baseline's noise means the window is not at the
/// baseline: a window where one of them rose is never `none`. Medians x1.5 and +20 ms;
/// tails, which a few requests per window make noisy, x2 and +50 ms (a healthy server at a few
/// times its baseline load batches more: seen, a TTFT p99 of 22 -> 45 ms at 4x).
const LATENCY_RISE: [Condition; 5] = [
    risen(Signal::TtftP50Ms, MEDIAN_RISE_RATIO, MEDIAN_RISE_MS),
    risen(Signal::E2eP50Ms, MEDIAN_RISE_RATIO, MEDIAN_RISE_MS),
    risen(Signal::TtftP99Ms, 2.0, 50.0),
    risen(Signal::ItlP99Ms, 2.0, 50.0),
    risen(Signal::E2eP99Ms, 2.0, 50.0),
];

/// Without load-generator records (an external generator drives the server), the rise is read
/// on the server's side: the kernel's request-in -> first token and whole exchange, and the
/// server's own mean TTFT, with the medians' thresholds; the whole exchange's tail with the
/// tails' (a vector index rebuild slows the slowest searches first).
const SERVER_LATENCY_RISE: [Condition; 4] = [
    risen(
        Signal::KernelFirstTokenP50Ms,
        MEDIAN_RISE_RATIO,
        MEDIAN_RISE_MS,
    ),
    risen(
        Signal::KernelExchangeP50Ms,
        MEDIAN_RISE_RATIO,
        MEDIAN_RISE_MS,
    ),
    risen(Signal::ServerTtftMeanMs, MEDIAN_RISE_RATIO, MEDIAN_RISE_MS),
    risen(Signal::KernelExchangeP99Ms, 2.0, 50.0),
];

const fn risen(signal: Signal, ratio: f64, min_delta: f64) -> Condition {
    Condition {
        signal,
        test: Test::Rises { ratio, min_delta },
        weight: 1.0,
        role: Role::Trigger,
    }
}

//! A phase that asked more than the server completed, or whose requests timed out.

use super::summary::{OVERLOAD_COMPLETED_SHARE, Overload, PhaseSummary};
use crate::attribute::verdict::Cause;
use crate::collect::timeline::Window;
use crate::measure::ErrorClass;

/// The phase's overload line: when requests timed out, or the server completed less than
/// [`OVERLOAD_COMPLETED_SHARE`] of the rate asked. `all` holds the phase's windows with its
/// drain (completions count until the last answer).
pub(super) fn overload(p: &PhaseSummary, all: &[&Window]) -> Option<Overload> {
    let timed_out = p
        .load
        .error_classes
        .get(&ErrorClass::Timeout)
        .copied()
        .unwrap_or(0);
    let sending_s: f64 = (p.end_unix_ms.saturating_sub(p.start_unix_ms)) as f64 / 1000.0;
    let all_s: f64 = all.iter().map(|w| w.len_ms as f64 / 1000.0).sum();
    if sending_s <= 0.0 || all_s <= 0.0 || p.load.requests == 0 {
        return None;
    }
    let asked_rps = p
        .load
        .target_rps
        .unwrap_or(p.load.requests as f64 / sending_s);
    let ok = p.load.requests.saturating_sub(p.load.errors);
    // What the server could complete: the successes over the time they had, the phase and
    // what it drained; never more than asked when everything succeeded.
    let completed_rps = ok as f64 / all_s.max(sending_s);
    let short = completed_rps < OVERLOAD_COMPLETED_SHARE * asked_rps && ok < p.load.requests;
    if timed_out == 0 && !short {
        return None;
    }
    let waited = p
        .saturated
        .as_ref()
        .map(|s| format!("in the server's queue: {s}"))
        .or_else(|| {
            (p.dominant == Cause::Queue)
                .then(|| "inside the server, before its first byte".to_owned())
        });
    Some(Overload {
        asked_rps,
        completed_rps,
        timed_out,
        sent: p.load.requests,
        waited,
    })
}

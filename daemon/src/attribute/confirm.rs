//! Confirming a phase's verdict by experiment: one short follow-up step at half the phase's
//! load. A cause that load drives (a full KV cache, an admission queue, saturated compute,
//! device memory) must give back most of the latency rise there; other causes (the network, a
//! CPU taken by a neighbour, the generator, an index rebuild, failures) cannot be confirmed by
//! changing the load alone, and the report says so.

use serde::{Deserialize, Serialize};

use super::verdict::Cause;

/// Share of the rise the follow-up step must give back for the verdict to be confirmed.
pub const GIVEN_BACK: f64 = 0.5;

/// What a follow-up step showed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Latency fell as the verdict predicts.
    Confirmed,
    /// Latency did not fall enough.
    NotConfirmed,
    /// The cause does not depend on the load alone: no step was run.
    CannotByLoad,
}

/// A phase's verdict put to the test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Confirmation {
    /// The cause tested.
    pub cause: Cause,
    /// What the step changed, e.g. `half the load: 8 req/s`.
    pub step: String,
    /// The phase's latency (its decomposition's band mean), ms.
    pub phase_ms: f64,
    /// The baseline's, ms.
    pub baseline_ms: f64,
    /// The step's, the same way, ms (absent when no step ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_ms: Option<f64>,
    /// What it showed.
    pub outcome: Outcome,
}

/// Whether `cause` can be confirmed by changing the load alone.
#[must_use]
pub fn by_load(cause: Cause) -> bool {
    matches!(
        cause,
        Cause::KvCache | Cause::Queue | Cause::Compute | Cause::GpuMemory
    )
}

/// The outcome of a step whose latency was `step_ms`, for a phase at `phase_ms` over a
/// baseline at `baseline_ms`: confirmed when the step gave back at least [`GIVEN_BACK`] of
/// the rise.
#[must_use]
pub fn judge(baseline_ms: f64, phase_ms: f64, step_ms: f64) -> Outcome {
    let rise = phase_ms - baseline_ms;
    if rise > 0.0 && phase_ms - step_ms >= GIVEN_BACK * rise {
        Outcome::Confirmed
    } else {
        Outcome::NotConfirmed
    }
}

impl Confirmation {
    /// One line: `confirmed: at half the load (8 req/s) TTFT fell from 2,215 to 12 ms
    /// (baseline 6 ms)`.
    #[must_use]
    pub fn line(&self) -> String {
        use super::verdict::fmt_num;
        match (self.outcome, self.step_ms) {
            (Outcome::CannotByLoad, _) | (_, None) => format!(
                "cannot be confirmed by load alone: {} does not depend on the load",
                self.cause
            ),
            (outcome, Some(step)) => format!(
                "{}: at {} latency {} from {} to {} ms (baseline {} ms)",
                if outcome == Outcome::Confirmed {
                    "confirmed"
                } else {
                    "not confirmed"
                },
                self.step,
                if step < self.phase_ms {
                    "fell"
                } else {
                    "stayed"
                },
                fmt_num(self.phase_ms),
                fmt_num(step),
                fmt_num(self.baseline_ms)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_that_gives_back_half_the_rise_confirms() {
        assert_eq!(judge(10.0, 1010.0, 400.0), Outcome::Confirmed);
        assert_eq!(judge(10.0, 1010.0, 700.0), Outcome::NotConfirmed);
        assert_eq!(judge(10.0, 5.0, 1.0), Outcome::NotConfirmed, "no rise");
        assert!(by_load(Cause::KvCache) && by_load(Cause::Queue));
        assert!(!by_load(Cause::Network) && !by_load(Cause::CpuRunqueue));
    }
}

//! Signals per window -> verdicts with evidence (the stage is placed in `docs/design.md`; the
//! verdicts are explained in `docs/explain.md`).
//!
//! [`attribute`] takes a [`Timeline`], finds a baseline per workload (a phase named
//! `baseline` or `*-baseline`, else the first phase, else the first windows), scores every rule
//! of [`rules::RULES`] on every window, and summarises each phase: share of windows per
//! verdict, the dominant verdict with its evidence and a hint, and where the latency increase
//! over the baseline went. It is a library on a time line: whoever collected it (`stress
//! --explain`, the node daemon) gets the same verdicts.
//!
//! ```
//! use inferscope::attribute::{attribute, Cause};
//! use inferscope::collect::timeline::Timeline;
//!
//! let timeline = Timeline::new(0, 1000);
//! let a = attribute(&timeline);
//! assert!(a.windows.iter().all(|w| w.verdict.cause != Cause::Loadgen));
//! ```

pub mod advice;
pub mod baseline;
pub mod bound;
pub mod causes;
pub mod confirm;
pub mod decompose;
pub mod energy;
mod evaluate;
pub mod hops;
pub mod lag;
pub mod missing;
pub mod phase;
pub mod prefix;
mod rank;
pub mod resources;
pub mod rolling;
pub mod rules;
pub mod signals;
mod verdict;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod compute_tests;

#[cfg(test)]
mod decompose_tests;

#[cfg(test)]
mod gpu_tests;

#[cfg(test)]
mod saturated_tests;

#[cfg(test)]
mod vector_tests;

use serde::{Deserialize, Serialize};

use crate::collect::timeline::Timeline;

pub use baseline::{Baseline, Baselines, Level, Workload};
pub use causes::CausePart;
pub use decompose::{Band, Basis, Decomposition, LatencyMetric, MEDIAN_BAND};
pub use evaluate::{RuleResult, score};
pub use phase::{CauseShare, Overload, PhaseLatency, PhaseLoad, PhaseSummary};
pub use rank::{MIN_CONFIDENCE, outranks};
pub use rules::{Condition, RULES, Role, Rule, Test};
pub use signals::Signal;
pub use verdict::{Cause, CauseScore, Evidence, Missing, Verdict, fmt_num};

/// The verdict of one window of the time line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WindowVerdict {
    /// Index in the time line's windows.
    pub index: usize,
    /// Window start, Unix ms.
    pub start_unix_ms: u64,
    /// The window's phase, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The verdict.
    pub verdict: Verdict,
    /// On a node, for a server that called others (a gateway): which of them holds the
    /// window's rise over its baseline (`node::hops`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hops: Option<hops::Hops>,
    /// On a node, for a server that called others: what it asked each of them for, per
    /// request it answered (`node::hops`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orchestration: Option<hops::Orchestration>,
}

/// Attribution of a whole time line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Attribution {
    /// What windows were compared against, one baseline per workload.
    pub baselines: Baselines,
    /// One verdict per window, in time-line order.
    pub windows: Vec<WindowVerdict>,
    /// One summary per phase, in order of first appearance.
    pub phases: Vec<PhaseSummary>,
}

impl Attribution {
    /// The summary of the phase called `name`.
    #[must_use]
    pub fn phase(&self, name: &str) -> Option<&PhaseSummary> {
        self.phases.iter().find(|p| p.name == name)
    }
}

/// Attributes every window of `timeline` with the default rules.
#[must_use]
pub fn attribute(timeline: &Timeline) -> Attribution {
    attribute_with(timeline, RULES)
}

/// Attributes every window of `timeline` with `rules`.
#[must_use]
pub fn attribute_with(timeline: &Timeline, rules: &[Rule]) -> Attribution {
    let baselines = Baselines::of(timeline);
    let none = Baseline::empty(Workload::Llm);
    let admission_cap = resources::admission_cap(&timeline.windows);
    let windows: Vec<WindowVerdict> = timeline
        .windows
        .iter()
        .enumerate()
        .map(|(index, window)| {
            let ctx = baseline::Ctx {
                window,
                index,
                baseline: baselines.for_window(window).unwrap_or(&none),
                admission_cap,
            };
            WindowVerdict {
                index,
                start_unix_ms: window.start_unix_ms,
                phase: window.phase.clone(),
                verdict: evaluate::verdict(rules, &ctx),
                hops: None,
                orchestration: None,
            }
        })
        .collect();
    let phases = phase::summarise(timeline, &windows, &baselines, admission_cap);
    Attribution {
        baselines,
        windows,
        phases,
    }
}

//! What a knee search turns (rate or users) and how it searches: its start, ceiling, steps,
//! budget and SLOs, from a scenario's first phase, its `search:` block and the flags.

use std::time::Duration;

use serde::Serialize;

use crate::loadgen::scenario::{Load, Scenario};
use crate::measure::slo::Slo;

/// What the search turns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Knob {
    /// Open-loop requests per second (constant arrivals).
    Rate,
    /// Closed-loop users (connections).
    Users,
}

impl Knob {
    /// Unit for tables.
    #[must_use]
    pub fn unit(self) -> &'static str {
        match self {
            Knob::Rate => "req/s",
            Knob::Users => "users",
        }
    }
}

/// How to search.
#[derive(Debug, Clone)]
pub struct SearchSpec {
    /// Rate or users.
    pub knob: Knob,
    /// First load tried.
    pub start: f64,
    /// Never above this load.
    pub ceiling: f64,
    /// Length of each step.
    pub step: Duration,
    /// Pause between steps (the server drains what an overloaded step left).
    pub pause: Duration,
    /// Load at the start load for this long before the first step, not judged: a server's
    /// first requests (connections, caches, lazy initialisation) are not its steady state.
    pub warmup: Duration,
    /// Stop bisecting when the highest pass and the lowest fail are within this share.
    pub tolerance: f64,
    /// Whole search, pauses included; no step starts that would end past it.
    pub budget: Duration,
    /// The SLOs every step must meet.
    pub slos: Vec<Slo>,
}

/// Flags that override a scenario's `search:` block.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// SLOs added to the block's and the first phase's.
    pub slos: Vec<Slo>,
    /// Highest load.
    pub max: Option<f64>,
    /// Step length.
    pub step: Option<Duration>,
    /// Whole search.
    pub budget: Option<Duration>,
}

/// Default step length.
pub const DEFAULT_STEP: Duration = Duration::from_secs(10);
/// Default time budget of a search.
pub const DEFAULT_BUDGET: Duration = Duration::from_mins(5);

impl SearchSpec {
    /// The search of `scenario`'s first phase: its load's kind and size start it (a rate, or
    /// users for `concurrency`), its `search:` block (if any) and `flags` set the rest. Errors
    /// say what to change.
    pub fn for_scenario(scenario: &Scenario, flags: Overrides) -> Result<Self, String> {
        let phase = scenario
            .phases
            .first()
            .ok_or("a knee search needs a phase to take the request from")?;
        let block = scenario.search.clone().unwrap_or_default();
        let (knob, from_phase, ceiling) = match phase.load.unshaped() {
            Load::Concurrency { users } => (Knob::Users, *users as f64, 4096.0),
            Load::Constant { rate } | Load::Poisson { rate } | Load::Gamma { rate, .. } => {
                (Knob::Rate, *rate, 10_000.0)
            }
            Load::Ramp { from, .. } => (Knob::Rate, *from, 10_000.0),
            // `unshaped` never returns a shaped load.
            Load::Trace { .. } | Load::Shaped(_) => {
                return Err(
                    "a knee search turns a rate or a number of users, not a trace replay: give the first phase `shape: constant` or `concurrency`".into(),
                );
            }
        };
        let mut slos = block.slo;
        slos.extend(phase.slo.iter().cloned());
        slos.extend(flags.slos);
        if slos.is_empty() {
            return Err(
                "a knee search needs an SLO to meet, e.g. --find-max 'ttft_p95 < 500ms'".into(),
            );
        }
        let start = block.start.unwrap_or(from_phase);
        let ceiling = flags.max.or(block.max).unwrap_or(ceiling);
        let limit = match knob {
            Knob::Rate => crate::loadgen::scenario::HARD_MAX_RATE,
            Knob::Users => crate::loadgen::scenario::HARD_MAX_IN_FLIGHT as f64,
        };
        if !(start > 0.0 && start <= ceiling && ceiling <= limit) {
            return Err(format!(
                "the search needs 0 < start ({start}) <= max ({ceiling}) <= {limit} {}",
                knob.unit()
            ));
        }
        Ok(Self {
            knob,
            start,
            ceiling,
            step: flags.step.or(block.step).unwrap_or(DEFAULT_STEP),
            pause: Duration::from_secs(2),
            warmup: flags
                .step
                .or(block.step)
                .unwrap_or(DEFAULT_STEP)
                .min(Duration::from_secs(5)),
            tolerance: block.tolerance.unwrap_or(0.05).max(0.01),
            budget: flags.budget.or(block.budget).unwrap_or(DEFAULT_BUDGET),
            slos,
        })
    }
}

//! How one rule fared on one window: its score, coverage and evidence.

use crate::attribute::baseline::Ctx;
use crate::attribute::resources::Bottleneck;
use crate::attribute::rules::{Outcome, Role, Rule};
use crate::attribute::verdict::{Cause, Evidence, Missing};

/// How one rule fared on one window.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleResult {
    /// The rule's cause.
    pub cause: Cause,
    /// The rule's signature.
    pub signature: &'static str,
    /// Weighted share of evaluated conditions that held (0 unless a trigger held).
    pub score: f64,
    /// Weighted share of the rule's conditions that could be evaluated, of those that apply to
    /// the window's requests (`Signal::applies_to`).
    pub coverage: f64,
    /// Whether any trigger could be evaluated at all.
    pub evaluable: bool,
    /// Whether any trigger applies to the window's requests (`Signal::applies_to`): a rule
    /// whose every trigger is a token timing cannot name a vector search's cause, so what it
    /// lacks is not missing.
    pub applies: bool,
    /// Evaluated conditions (held or not).
    pub evidence: Vec<Evidence>,
    /// Trigger conditions that were evaluated and did not hold: evidence of absence.
    pub quiet_triggers: Vec<Evidence>,
    /// Conditions that could not be evaluated.
    pub missing: Vec<Missing>,
    /// The proof the rule lacked when its triggers held and nothing else refuted it: the
    /// evidence that would have named its cause (`Role::Proof`).
    pub unproven: Vec<Missing>,
    /// Read by the resource model (a resource full with requests waiting for it): a bottleneck
    /// whatever the baseline, so it needs no latency rise over it.
    pub absolute: bool,
}

impl RuleResult {
    /// The score lowered by missing conditions: a rule decided on half its signals is less sure.
    #[must_use]
    pub fn confidence(&self) -> f64 {
        self.score * (0.5 + 0.5 * self.coverage)
    }
}

/// Evaluates one rule.
#[must_use]
pub fn score(rule: &Rule, ctx: &Ctx<'_>) -> RuleResult {
    let (mut total, mut evaluated, mut met) = (0.0, 0.0, 0.0);
    let (mut evaluable, mut triggered, mut refuted, mut applies) = (false, false, false, false);
    let mut evidence = Vec::new();
    let mut quiet_triggers = Vec::new();
    let mut missing = Vec::new();
    let mut unproven = Vec::new();
    for c in rule.conditions {
        let trigger = c.role == Role::Trigger;
        let outcome = c.evaluate(ctx);
        // A condition on a signal the window's requests cannot have is no part of the rule
        // there: it neither lowers the coverage nor goes missing.
        if outcome != Outcome::Inapplicable {
            total += c.weight;
            applies |= trigger;
        }
        match outcome {
            Outcome::Evaluated(e) => {
                evaluated += c.weight;
                evaluable |= trigger;
                if e.met {
                    met += c.weight;
                    triggered |= trigger;
                } else if trigger {
                    quiet_triggers.push(e.clone());
                } else if matches!(c.role, Role::Require | Role::Proof) {
                    refuted = true;
                }
                evidence.push(e);
            }
            Outcome::Missing(m) => {
                if c.role == Role::Proof {
                    unproven.push(m.clone());
                }
                missing.push(m);
            }
            Outcome::Inapplicable => {}
        }
    }
    let score = if triggered && !refuted && unproven.is_empty() && evaluated > 0.0 {
        met / evaluated
    } else {
        0.0
    };
    if !triggered || refuted {
        unproven.clear();
    }
    let coverage = if total > 0.0 { evaluated / total } else { 0.0 };
    if !applies {
        missing.clear();
    }
    RuleResult {
        cause: rule.cause,
        signature: rule.signature,
        score,
        coverage,
        evaluable,
        applies,
        evidence,
        quiet_triggers,
        missing,
        unproven,
        absolute: false,
    }
}

/// The resource model's finding (`attribute::resources`) as one more result beside the rules'.
pub(super) fn resource_result(b: Bottleneck) -> RuleResult {
    RuleResult {
        cause: b.cause,
        signature: b.signature,
        score: b.confidence,
        coverage: 1.0,
        evaluable: true,
        applies: true,
        evidence: b.evidence,
        quiet_triggers: Vec::new(),
        missing: Vec::new(),
        unproven: Vec::new(),
        absolute: true,
    }
}

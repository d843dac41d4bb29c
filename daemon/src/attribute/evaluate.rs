//! Scores every rule on a window and picks the verdict.

use super::rules::{Outcome, Rule};
use super::signals::Ctx;
use super::verdict::{Cause, CauseScore, Evidence, Verdict};

/// Least confidence for naming a cause; below it the verdict is `none`.
pub const MIN_CONFIDENCE: f64 = 0.5;

/// How one rule fared on one window.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleResult {
    /// The rule's cause.
    pub cause: Cause,
    /// Weighted share of evaluated conditions that held (0 unless a trigger held).
    pub score: f64,
    /// Weighted share of the rule's conditions that could be evaluated.
    pub coverage: f64,
    /// Whether any trigger could be evaluated at all.
    pub evaluable: bool,
    /// Evaluated conditions (held or not).
    pub evidence: Vec<Evidence>,
    /// Trigger conditions that were evaluated and did not hold: evidence of absence.
    pub quiet_triggers: Vec<Evidence>,
    /// Conditions that could not be evaluated.
    pub missing: Vec<String>,
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
    let (mut evaluable, mut triggered) = (false, false);
    let mut evidence = Vec::new();
    let mut quiet_triggers = Vec::new();
    let mut missing = Vec::new();
    for c in rule.conditions {
        total += c.weight;
        match c.evaluate(ctx) {
            Outcome::Evaluated(e) => {
                evaluated += c.weight;
                evaluable |= c.trigger;
                if e.met {
                    met += c.weight;
                    triggered |= c.trigger;
                } else if c.trigger {
                    quiet_triggers.push(e.clone());
                }
                evidence.push(e);
            }
            Outcome::Missing(m) => missing.push(m),
        }
    }
    let score = if triggered && evaluated > 0.0 {
        met / evaluated
    } else {
        0.0
    };
    let coverage = if total > 0.0 { evaluated / total } else { 0.0 };
    RuleResult {
        cause: rule.cause,
        score,
        coverage,
        evaluable,
        evidence,
        quiet_triggers,
        missing,
    }
}

/// The verdict for one window under `rules`.
///
/// The best confidence at or above [`MIN_CONFIDENCE`] wins, except that a convincing `loadgen`
/// always wins: when the generator lags, every other signal's latency is measured wrong.
#[must_use]
pub fn verdict(rules: &[Rule], ctx: &Ctx<'_>) -> Verdict {
    let mut results: Vec<RuleResult> = rules.iter().map(|r| score(r, ctx)).collect();
    results.sort_by(|a, b| b.confidence().total_cmp(&a.confidence()));
    let winner = results
        .iter()
        .position(|r| r.cause == Cause::Loadgen && r.confidence() >= MIN_CONFIDENCE)
        .or_else(|| {
            results
                .first()
                .filter(|r| r.confidence() >= MIN_CONFIDENCE)
                .map(|_| 0)
        });
    let runners_up = |skip: Option<usize>| -> Vec<CauseScore> {
        results
            .iter()
            .enumerate()
            .filter(|(i, r)| Some(*i) != skip && r.score > 0.0)
            .map(|(_, r)| CauseScore {
                cause: r.cause,
                score: r.score,
                confidence: r.confidence(),
            })
            .collect()
    };
    match winner {
        Some(i) => {
            let w = &results[i];
            let (evidence, contrary) = w.evidence.iter().cloned().partition(|e| e.met);
            Verdict {
                cause: w.cause,
                confidence: w.confidence(),
                evidence,
                contrary,
                runners_up: runners_up(Some(i)),
                missing: w.missing.clone(),
            }
        }
        None => none_verdict(&results, runners_up(None)),
    }
}

/// `none`: sure when every rule could look and none fired, unsure when rules could not look.
fn none_verdict(results: &[RuleResult], runners_up: Vec<CauseScore>) -> Verdict {
    let best = results.first().map_or(0.0, RuleResult::confidence);
    let looked = results.iter().filter(|r| r.evaluable).count();
    let share = if results.is_empty() {
        0.0
    } else {
        looked as f64 / results.len() as f64
    };
    // Evidence of absence: the triggers that were evaluated and did not hold.
    let mut evidence: Vec<Evidence> = Vec::new();
    for e in results.iter().flat_map(|r| r.quiet_triggers.iter()) {
        if !evidence.iter().any(|x| x.signal == e.signal) {
            evidence.push(e.clone());
        }
    }
    let mut missing: Vec<String> = results
        .iter()
        .filter(|r| !r.evaluable)
        .map(|r| format!("{}: {}", r.cause, r.missing.join(", ")))
        .collect();
    missing.dedup();
    Verdict {
        cause: Cause::None,
        confidence: (1.0 - best) * (0.2 + 0.8 * share),
        evidence,
        contrary: Vec::new(),
        runners_up,
        missing,
    }
}

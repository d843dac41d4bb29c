//! The verdict of a window no cause convincingly explains: `unexplained` when its latency rose,
//! `none` when it did not.

use super::score::RuleResult;
use crate::attribute::verdict::{Cause, CauseScore, Evidence, Missing, Verdict};

/// `unexplained`: latency rose beyond the baseline's noise and no rule is convincing. The
/// evidence is the rise; `missing` lists every signal any rule wanted and the window lacked.
pub(super) fn unexplained_verdict(
    results: &[RuleResult],
    best: f64,
    risen: Vec<Evidence>,
    runners_up: Vec<CauseScore>,
) -> Verdict {
    let missing = distinct(results.iter().flat_map(|r| r.missing.iter()));
    // Sure that latency rose (the rise passed the noise band); as sure that nothing explains
    // it as the best cause is unconvincing.
    Verdict {
        cause: Cause::Unexplained,
        signature: None,
        confidence: 1.0 - best,
        own_confidence: None,
        evidence: risen,
        contrary: Vec::new(),
        runners_up,
        missing,
    }
}

/// Each missing signal once, in order of first appearance.
fn distinct<'a>(all: impl Iterator<Item = &'a Missing>) -> Vec<Missing> {
    let mut out: Vec<Missing> = Vec::new();
    for m in all {
        if !out.contains(m) {
            out.push(m.clone());
        }
    }
    out
}

/// `none`: sure when every rule that applies to the window's requests could look and none
/// fired, unsure when rules could not look.
pub(super) fn none_verdict(
    results: &[RuleResult],
    best: f64,
    runners_up: Vec<CauseScore>,
) -> Verdict {
    let looked = results.iter().filter(|r| r.evaluable).count();
    let applying = results.iter().filter(|r| r.applies).count();
    let share = if applying == 0 {
        0.0
    } else {
        looked as f64 / applying as f64
    };
    // Evidence of absence: the triggers that were evaluated and did not hold.
    let mut evidence: Vec<Evidence> = Vec::new();
    for e in results.iter().flat_map(|r| r.quiet_triggers.iter()) {
        if !evidence.iter().any(|x| x.signal == e.signal) {
            evidence.push(e.clone());
        }
    }
    let missing = distinct(
        results
            .iter()
            .filter(|r| !r.evaluable)
            .flat_map(|r| r.missing.iter()),
    );
    Verdict {
        cause: Cause::None,
        signature: None,
        confidence: (1.0 - best) * (0.2 + 0.8 * share),
        own_confidence: None,
        evidence,
        contrary: Vec::new(),
        runners_up,
        missing,
    }
}

//! One ranking of the causes that scored on a window. A cause's rank is its confidence, raised
//! to the rank of every convincing cause it [`outranks`] (it explains their symptoms, so their
//! evidence counts for it too): precedence is folded into the one score, and the winner never
//! shows less than a runner-up. Equal ranks go to the cause higher in the precedence order.

use super::evaluate::{MIN_CONFIDENCE, RuleResult, outranks};
use super::verdict::Cause;

/// The rank of each of `results` (same order), see the module doc.
#[must_use]
pub fn ranks(results: &[RuleResult]) -> Vec<f64> {
    let conf: Vec<f64> = results.iter().map(RuleResult::confidence).collect();
    let mut rank = conf.clone();
    // Precedence has no cycle: a pass per result reaches the fixed point.
    for _ in 0..results.len() {
        let mut changed = false;
        for (i, a) in results.iter().enumerate() {
            if conf[i] < MIN_CONFIDENCE {
                continue;
            }
            for (j, b) in results.iter().enumerate() {
                if conf[j] >= MIN_CONFIDENCE && outranks(a.cause, b.cause) && rank[j] > rank[i] {
                    rank[i] = rank[j];
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    rank
}

/// How many causes below `c` in the longest chain of precedence: a cause that outranks
/// another is always deeper, so it breaks ties in rank the way precedence does.
#[must_use]
pub fn depth(c: Cause) -> usize {
    Cause::ALL
        .iter()
        .filter(|&&b| b != c && outranks(c, b))
        .map(|&b| depth(b) + 1)
        .max()
        .unwrap_or(0)
}

/// The order of `results` by rank (best first), ties to the deeper cause, then to the higher
/// own confidence: indices into `results`.
#[must_use]
pub fn order(results: &[RuleResult], rank: &[f64]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..results.len()).collect();
    idx.sort_by(|&a, &b| {
        rank[b]
            .total_cmp(&rank[a])
            .then_with(|| depth(results[b].cause).cmp(&depth(results[a].cause)))
            .then_with(|| results[b].confidence().total_cmp(&results[a].confidence()))
    });
    idx
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(cause: Cause, score: f64) -> RuleResult {
        RuleResult {
            cause,
            signature: "t",
            score,
            coverage: 1.0,
            evaluable: true,
            applies: true,
            evidence: Vec::new(),
            quiet_triggers: Vec::new(),
            missing: Vec::new(),
        }
    }

    #[test]
    fn a_cause_that_explains_a_more_confident_one_carries_its_rank() {
        let rs = [
            result(Cause::Queue, 0.75),
            result(Cause::KvCache, 0.64),
            result(Cause::Network, 0.7),
        ];
        let rank = ranks(&rs);
        assert_eq!(rank, [0.75, 0.75, 0.7]);
        // Tied with the queue it explains: precedence breaks the tie.
        assert_eq!(order(&rs, &rank), [1, 0, 2]);
    }

    #[test]
    fn an_unconvincing_cause_carries_nothing() {
        let rs = [result(Cause::Queue, 0.9), result(Cause::KvCache, 0.4)];
        assert_eq!(ranks(&rs), [0.9, 0.4]);
    }

    #[test]
    fn precedence_is_deeper_for_the_cause_that_outranks() {
        for a in Cause::ALL {
            for b in Cause::ALL {
                if a != b && outranks(a, b) {
                    assert!(depth(a) > depth(b), "{a} over {b}");
                }
            }
        }
    }
}

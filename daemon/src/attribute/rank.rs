//! One ranking of the causes that scored on a window. A cause's rank is its confidence, raised
//! to the rank of every convincing cause it [`outranks`] (it explains their symptoms, so their
//! evidence counts for it too): precedence is folded into the one score, and the winner never
//! shows less than a runner-up. Equal ranks go to the cause higher in the precedence order.

use super::verdict::Cause;

/// Least confidence for naming a cause; below it the verdict is `none`.
pub const MIN_CONFIDENCE: f64 = 0.5;

/// Whether cause `a` explains `b`'s symptoms: a convincing `a` carries a convincing `b`'s rank
/// and wins a tie with it (`super::rank`). When the generator lags, every other latency is
/// measured wrong; a full KV cache, a GPU out of memory or throttled, a server starved of CPU or an index
/// rebuilding is why requests wait inside the server (a rebuild also why its threads wait for
/// a CPU); and any named bottleneck explains the errors it causes.
#[must_use]
pub fn outranks(a: Cause, b: Cause) -> bool {
    match a {
        Cause::Loadgen => b != Cause::Loadgen,
        // A full cache (recompute) or a failing allocator also makes every step slower: they
        // explain a saturated-looking engine. A starved server does too, but the two rules
        // split on one signal, so neither explains the other: others taking its CPUs raise the
        // share of the time its threads wanted one that they spent waiting (`cpu_runqueue` needs
        // +0.2), an engine busy with its own batch barely moves it (`compute` needs it flat).
        Cause::KvCache | Cause::GpuMemory => {
            matches!(b, Cause::Queue | Cause::Errors | Cause::Compute)
        }
        // A throttled GPU makes every step slower: it explains a saturated-looking engine and
        // the requests that queue behind it.
        Cause::GpuThrottle => matches!(b, Cause::Queue | Cause::Errors | Cause::Compute),
        Cause::CpuRunqueue => matches!(b, Cause::Queue | Cause::Errors),
        // The same prefill computed many times over is why requests wait for their first
        // token and why each step carries more prompt tokens.
        Cause::DuplicatePrefill => matches!(b, Cause::Queue | Cause::Errors | Cause::Compute),
        // Its rule needs free slots and a first token as many steps away as before: a kernel
        // view of requests waiting longer for their first token is then waiting for the longer
        // steps, not for admission.
        Cause::Compute => matches!(b, Cause::Queue | Cause::Errors),
        // A rebuild is CPU work of the server's own: its threads wait for a CPU because of it.
        Cause::VectorIndex => matches!(b, Cause::Queue | Cause::Errors | Cause::CpuRunqueue),
        Cause::Queue | Cause::Network => b == Cause::Errors,
        _ => false,
    }
}

/// The rank of each of `results` (cause and own confidence, same order), see the module doc.
#[must_use]
pub fn ranks(results: &[(Cause, f64)]) -> Vec<f64> {
    let conf: Vec<f64> = results.iter().map(|r| r.1).collect();
    let mut rank = conf.clone();
    // Precedence has no cycle: a pass per result reaches the fixed point.
    for _ in 0..results.len() {
        let mut changed = false;
        for (i, a) in results.iter().enumerate() {
            if conf[i] < MIN_CONFIDENCE {
                continue;
            }
            for (j, b) in results.iter().enumerate() {
                if conf[j] >= MIN_CONFIDENCE && outranks(a.0, b.0) && rank[j] > rank[i] {
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
pub fn order(results: &[(Cause, f64)], rank: &[f64]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..results.len()).collect();
    idx.sort_by(|&a, &b| {
        rank[b]
            .total_cmp(&rank[a])
            .then_with(|| depth(results[b].0).cmp(&depth(results[a].0)))
            .then_with(|| results[b].1.total_cmp(&results[a].1))
    });
    idx
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(cause: Cause, confidence: f64) -> (Cause, f64) {
        (cause, confidence)
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

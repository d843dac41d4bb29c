//! Picks a window's verdict among the rules' results and the resource model's.

use super::evidence::{error_classes, xid_evidence};
use super::no_cause::{none_verdict, unexplained_verdict};
use super::rise::latency_rise;
use super::score::{RuleResult, resource_result, score};
use crate::attribute::baseline::Ctx;
use crate::attribute::rank::{MIN_CONFIDENCE, outranks};
use crate::attribute::resources;
use crate::attribute::rules::Rule;
use crate::attribute::verdict::{Cause, CauseScore, Evidence, Verdict};

/// The verdict for one window under `rules`: the best rank (see [`crate::attribute::rank`])
/// among the causes whose own confidence is at least [`MIN_CONFIDENCE`].
#[must_use]
pub fn verdict(rules: &[Rule], ctx: &Ctx<'_>) -> Verdict {
    let mut results: Vec<RuleResult> = rules.iter().map(|r| score(r, ctx)).collect();
    results.extend(resources::bottleneck(ctx).map(resource_result));
    let scored: Vec<(Cause, f64)> = results.iter().map(|r| (r.cause, r.confidence())).collect();
    let rank = crate::attribute::rank::ranks(&scored);
    let order = crate::attribute::rank::order(&scored, &rank);
    let convincing = |i: usize| results[i].confidence() >= MIN_CONFIDENCE;
    let runners_up = |skip: Option<usize>| -> Vec<CauseScore> {
        let skip_cause = skip.map(|i| results[i].cause);
        let mut out: Vec<CauseScore> = Vec::new();
        // In rank order: a cause's first result is its best signature.
        for &i in order.iter().filter(|&&i| results[i].score > 0.0) {
            let r = &results[i];
            if Some(r.cause) != skip_cause && !out.iter().any(|c| c.cause == r.cause) {
                let explained_by = skip_cause.filter(|&w| convincing(i) && outranks(w, r.cause));
                out.push(CauseScore {
                    cause: r.cause,
                    score: r.score,
                    confidence: rank[i],
                    explained_by,
                });
            }
        }
        out
    };
    let risen = latency_rise(ctx);
    // A named cause needs latency off its baseline (`none` means latency is at the baseline):
    // a full KV cache while the window's requests are as fast as ever is no bottleneck yet. A
    // lagging generator (the latencies are wrong) and failing requests need no rise, nor does a
    // window without any latency signal to judge by. A resource full with requests waiting
    // for it is a bottleneck whatever the baseline (a saturated baseline is one).
    let failing = results
        .iter()
        .any(|r| r.cause == Cause::Errors && r.confidence() >= MIN_CONFIDENCE);
    let passes = |i: usize| {
        results[i].cause == Cause::Loadgen
            || results[i].absolute
            || failing
            || risen.as_ref().is_none_or(|r| !r.is_empty())
    };
    let winner = order
        .iter()
        .copied()
        .filter(|&i| convincing(i))
        .find(|&i| passes(i));
    let best = results
        .iter()
        .map(RuleResult::confidence)
        .fold(0.0, f64::max);
    // An XID during the rise is named, whatever the verdict: a GPU fault explains much.
    let rose = risen.as_ref().is_some_and(|r| !r.is_empty());
    let xids = if rose { xid_evidence(ctx) } else { Vec::new() };
    let Some(i) = winner else {
        let mut risen = risen.unwrap_or_default();
        return if risen.is_empty() {
            none_verdict(&results, best, runners_up(None))
        } else {
            risen.extend(xids);
            unexplained_verdict(&results, best, risen, runners_up(None))
        };
    };
    let w = &results[i];
    let (mut evidence, contrary): (Vec<Evidence>, Vec<Evidence>) =
        w.evidence.iter().cloned().partition(|e| e.met);
    // The cause's other convincing signatures (the resource model beside a rule, or the
    // reverse) hold evidence for it too: each signal once.
    for (k, r) in results.iter().enumerate() {
        if k != i && r.cause == w.cause && convincing(k) {
            for e in r.evidence.iter().filter(|e| e.met) {
                if !evidence.iter().any(|x| x.signal == e.signal) {
                    evidence.push(e.clone());
                }
            }
        }
    }
    if w.cause == Cause::Errors {
        evidence.extend(error_classes(ctx));
    }
    evidence.extend(xids);
    // The proof a cause that would explain the winner lacked (an index rebuild behind requests
    // waiting in the server) could have changed the verdict: it is missing here too.
    let mut missing = w.missing.clone();
    for m in results
        .iter()
        .filter(|r| outranks(r.cause, w.cause))
        .flat_map(|r| &r.unproven)
    {
        if !missing.contains(m) {
            missing.push(m.clone());
        }
    }
    Verdict {
        cause: w.cause,
        signature: Some(w.signature.to_owned()),
        confidence: rank[i],
        own_confidence: (rank[i] > w.confidence()).then(|| w.confidence()),
        evidence,
        contrary,
        runners_up: runners_up(Some(i)),
        missing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribute::baseline::Baseline;
    use crate::attribute::rules::{Condition, RULES, Test};
    use crate::attribute::signals::Signal;
    use crate::collect::timeline::{LoadSignals, Quantiles, RunqSignals, ServerSignals, Window};

    fn q(v: f64) -> Quantiles {
        Quantiles {
            p50: v,
            p95: v,
            p99: v,
            max: v,
        }
    }

    fn window(ttft: f64, lag_p99: f64, server: Option<ServerSignals>) -> Window {
        Window {
            len_ms: 1000,
            load: Some(LoadSignals {
                requests: 20,
                target_rps: Some(20.0),
                achieved_rps: 20.0,
                ttft_ms: Some(q(ttft)),
                itl_ms: Some(q(20.0)),
                send_lag_ms: Some(Quantiles {
                    p50: lag_p99 / 4.0,
                    p95: lag_p99,
                    p99: lag_p99,
                    max: lag_p99,
                }),
                ..LoadSignals::default()
            }),
            server,
            ..Window::default()
        }
    }

    fn healthy_server() -> ServerSignals {
        ServerSignals {
            running: Some(10.0),
            waiting: Some(0.0),
            kv_usage: Some(0.3),
            preemptions_per_s: Some(0.0),
            queue_time_p95_ms: Some(5.0),
            ..ServerSignals::default()
        }
    }

    fn run(windows: Vec<Window>) -> Vec<Verdict> {
        let t = crate::collect::timeline::Timeline {
            origin_unix_ms: 0,
            len_ms: 1000,
            windows,
            marks: Vec::new(),
        };
        let base = Baseline::of(&t, crate::attribute::Workload::Llm).unwrap();
        t.windows
            .iter()
            .enumerate()
            .map(|(index, window)| {
                verdict(
                    RULES,
                    &Ctx {
                        window,
                        index,
                        baseline: &base,
                        admission_cap: None,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn support_conditions_alone_never_raise_a_cause() {
        // Healthy: "ITL flat", "KV < 0.9" and "no preemptions" all hold, but no queue trigger does.
        let v = run(vec![window(80.0, 0.5, Some(healthy_server())); 6]);
        let last = v.last().unwrap();
        assert_eq!(last.cause, Cause::None);
        assert!(last.runners_up.is_empty(), "{:#?}", last.runners_up);
        assert!(
            last.evidence
                .iter()
                .any(|e| e.signal == "waiting" && !e.met)
        );
    }

    #[test]
    fn a_lagging_generator_wins_over_a_stronger_cause() {
        let mut ws = vec![window(80.0, 0.5, Some(healthy_server())); 5];
        let kv = ServerSignals {
            kv_usage: Some(0.99),
            preemptions_per_s: Some(5.0),
            waiting: Some(40.0),
            ..healthy_server()
        };
        ws.push(window(900.0, 60.0, Some(kv.clone())));
        ws.push(window(900.0, 0.5, Some(kv)));
        let v = run(ws);
        let lagging = &v[5];
        assert_eq!(lagging.cause, Cause::Loadgen, "{lagging:#?}");
        let kv_score = lagging
            .runners_up
            .iter()
            .find(|r| r.cause == Cause::KvCache)
            .unwrap();
        // Precedence is folded into the rank: the generator carries the cache's rank, and the
        // cache is explained by it.
        assert!(kv_score.confidence <= lagging.confidence, "{lagging:#?}");
        assert_eq!(kv_score.explained_by, Some(Cause::Loadgen));
        assert!(
            lagging
                .own_confidence
                .is_some_and(|c| c < lagging.confidence)
        );
        // The generator's own run-queue is not watched: named, and the confidence is lower.
        assert!(
            lagging
                .missing
                .iter()
                .any(|m| m.signal == "loadgen_runq_p99_us")
        );
        assert_eq!(v[6].cause, Cause::KvCache);
    }

    #[test]
    fn a_full_preempting_cache_outranks_the_queue_it_causes() {
        let base = ServerSignals {
            queue_time_mean_ms: Some(3.0),
            ttft_mean_ms: Some(60.0),
            prefix_hit_rate: Some(0.4),
            ..healthy_server()
        };
        let mut ws = vec![window(80.0, 0.5, Some(base.clone())); 5];
        // Requests queue with the cache full: the queue rule's triggers all hold, its
        // "cache has room" conditions do not.
        let queued = |kv: f64, preempt: f64| ServerSignals {
            kv_usage: Some(kv),
            preemptions_per_s: Some(preempt),
            waiting: Some(60.0),
            queue_time_p95_ms: Some(900.0),
            queue_time_mean_ms: Some(700.0),
            ttft_mean_ms: Some(800.0),
            ..base.clone()
        };
        ws.push(window(900.0, 0.5, Some(queued(1.0, 20.0))));
        ws.push(window(900.0, 0.5, Some(queued(0.3, 0.0))));
        let v = run(ws);
        let full = &v[5];
        assert_eq!(full.cause, Cause::KvCache, "{full:#?}");
        let queue = full
            .runners_up
            .iter()
            .find(|r| r.cause == Cause::Queue)
            .unwrap();
        assert!(queue.confidence <= full.confidence, "{full:#?}");
        assert_eq!(queue.explained_by, Some(Cause::KvCache));
        assert_eq!(v[6].cause, Cause::Queue, "{:#?}", v[6]);
    }

    #[test]
    fn a_full_cache_while_latency_is_at_the_baseline_is_none() {
        let full = ServerSignals {
            kv_usage: Some(0.99),
            preemptions_per_s: Some(5.0),
            ..healthy_server()
        };
        let mut ws = vec![window(80.0, 0.5, Some(healthy_server())); 5];
        ws.push(window(82.0, 0.5, Some(full.clone())));
        ws.push(window(900.0, 0.5, Some(full)));
        let v = run(ws);
        assert_eq!(v[5].cause, Cause::None, "{:#?}", v[5]);
        assert_eq!(v[5].runners_up[0].cause, Cause::KvCache);
        assert_eq!(v[6].cause, Cause::KvCache, "{:#?}", v[6]);
    }

    #[test]
    fn a_rule_without_any_trigger_signal_is_not_evaluated() {
        let mut ws = vec![window(80.0, 0.5, None); 5];
        ws.push(window(800.0, 0.5, None));
        ws.push(window(81.0, 0.5, None));
        let v = run(ws);
        // TTFT x10 and no rule could look: a rise nothing explains, never `none`.
        let risen = &v[5];
        assert_eq!(risen.cause, Cause::Unexplained, "{risen:#?}");
        assert!(risen.evidence.iter().any(|e| e.signal == "ttft_p50_ms"));
        // Back at the baseline: `none`, unsure because no rule could look.
        let last = v.last().unwrap();
        assert_eq!(last.cause, Cause::None);
        assert!(last.confidence < 0.5, "{}", last.confidence);
        for signal in [
            "kv_usage",
            "queue_time_p95_ms",
            "gpu_oom",
            "runq_p99_us",
            "srtt_mean_us",
        ] {
            assert!(
                last.missing.iter().any(|m| m.signal == signal),
                "{signal}: {:?}",
                last.missing
            );
        }
    }

    #[test]
    fn without_load_records_the_server_side_latency_decides_the_rise() {
        use crate::collect::timeline::NetSignals;
        // First token flat (no queue), the whole exchange 10x: a rise nothing here explains.
        let server_only = |exchange: f64| Window {
            len_ms: 1000,
            net: Some(NetSignals {
                exchanges: 10,
                server_first_token_p50_ms: Some(20.0),
                exchange_p50_ms: Some(exchange),
                ..NetSignals::default()
            }),
            ..Window::default()
        };
        let mut ws: Vec<Window> = (0..5).map(|i| server_only(100.0 + f64::from(i))).collect();
        ws.push(server_only(1000.0));
        ws.push(server_only(102.0));
        let v = run(ws);
        let risen = &v[5];
        assert_eq!(risen.cause, Cause::Unexplained, "{risen:#?}");
        assert!(
            risen
                .evidence
                .iter()
                .any(|e| e.signal == "kernel_exchange_p50_ms"),
            "{risen:#?}"
        );
        assert_eq!(v[6].cause, Cause::None, "{:#?}", v[6]);
    }

    #[test]
    fn rises_needs_both_ratio_and_delta() {
        let cond = Condition {
            signal: Signal::RunqP99Us,
            test: Test::Rises {
                ratio: 2.0,
                min_delta: 1000.0,
            },
            weight: 1.0,
            role: crate::attribute::Role::Trigger,
        };
        let runq = |p99| RunqSignals {
            samples: 100,
            p99_us: p99,
            ..RunqSignals::default()
        };
        let mut ws: Vec<Window> = (0..5)
            .map(|_| Window {
                runq: Some(runq(50.0)),
                ..Window::default()
            })
            .collect();
        // 10x but only +450 µs: noise on a tiny baseline, not a rise.
        ws.push(Window {
            runq: Some(runq(500.0)),
            ..Window::default()
        });
        ws.push(Window {
            runq: Some(runq(1200.0)),
            ..Window::default()
        });
        let t = crate::collect::timeline::Timeline {
            origin_unix_ms: 0,
            len_ms: 1000,
            windows: ws,
            marks: Vec::new(),
        };
        let base = Baseline::of(&t, crate::attribute::Workload::Llm).unwrap();
        let met = |i: usize| match cond.evaluate(&Ctx {
            window: &t.windows[i],
            index: i,
            baseline: &base,
            admission_cap: None,
        }) {
            crate::attribute::rules::Outcome::Evaluated(e) => e.met,
            other => panic!("{other:?}"),
        };
        assert!(!met(5));
        assert!(met(6));
    }
}

//! Scores every rule on a window and picks the verdict.

use super::baseline::Ctx;
use super::rank::{MIN_CONFIDENCE, outranks};
use super::rules::{Condition, Outcome, Role, Rule, Test};
use super::signals::Signal;
use super::verdict::{Cause, CauseScore, Evidence, Missing, Verdict};
use crate::collect::timeline::XidSource;

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
                } else if c.role == Role::Require {
                    refuted = true;
                }
                evidence.push(e);
            }
            Outcome::Missing(m) => missing.push(m),
            Outcome::Inapplicable => {}
        }
    }
    let score = if triggered && !refuted && evaluated > 0.0 {
        met / evaluated
    } else {
        0.0
    };
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
        absolute: false,
    }
}

/// The resource model's finding (`super::resources`) as one more result beside the rules'.
fn resource_result(b: super::resources::Bottleneck) -> RuleResult {
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
        absolute: true,
    }
}

/// The latency signals that rose beyond the baseline's noise: the client's when the window has
/// them, else the server side the kernel saw; `None` when neither could be evaluated.
fn latency_rise(ctx: &Ctx<'_>) -> Option<Vec<Evidence>> {
    [&LATENCY_RISE[..], &SERVER_LATENCY_RISE[..]]
        .into_iter()
        .find_map(|list| {
            let outcomes: Vec<Outcome> = list.iter().map(|c| c.evaluate(ctx)).collect();
            outcomes
                .iter()
                .any(|o| matches!(o, Outcome::Evaluated(_)))
                .then(|| {
                    outcomes
                        .into_iter()
                        .filter_map(|o| match o {
                            Outcome::Evaluated(e) if e.met => Some(e),
                            Outcome::Evaluated(_) | Outcome::Missing(_) | Outcome::Inapplicable => {
                                None
                            }
                        })
                        .collect()
                })
        })
}

/// Factor over the baseline a latency median must reach to have risen ([`LATENCY_RISE`]).
pub const MEDIAN_RISE_RATIO: f64 = 1.5;
/// Least rise of a latency median, ms ([`LATENCY_RISE`]).
pub const MEDIAN_RISE_MS: f64 = 20.0;

/// Latency signals whose rise beyond the baseline's noise means the window is not at the
/// baseline: a window where one of them rose is never `none`. Medians x1.5 and +20 ms;
/// tails, which a few requests per window make noisy, x2 and +50 ms (a healthy server at a few
/// times its baseline load batches more: seen, a TTFT p99 of 22 -> 45 ms at 4x).
const LATENCY_RISE: [Condition; 5] = [
    risen(Signal::TtftP50Ms, MEDIAN_RISE_RATIO, MEDIAN_RISE_MS),
    risen(Signal::E2eP50Ms, MEDIAN_RISE_RATIO, MEDIAN_RISE_MS),
    risen(Signal::TtftP99Ms, 2.0, 50.0),
    risen(Signal::ItlP99Ms, 2.0, 50.0),
    risen(Signal::E2eP99Ms, 2.0, 50.0),
];

/// Without load-generator records (an external generator drives the server), the rise is read
/// on the server's side: the kernel's request-in -> first token and whole exchange, and the
/// server's own mean TTFT, with the medians' thresholds; the whole exchange's tail with the
/// tails' (a vector index rebuild slows the slowest searches first).
const SERVER_LATENCY_RISE: [Condition; 4] = [
    risen(
        Signal::KernelFirstTokenP50Ms,
        MEDIAN_RISE_RATIO,
        MEDIAN_RISE_MS,
    ),
    risen(
        Signal::KernelExchangeP50Ms,
        MEDIAN_RISE_RATIO,
        MEDIAN_RISE_MS,
    ),
    risen(Signal::ServerTtftMeanMs, MEDIAN_RISE_RATIO, MEDIAN_RISE_MS),
    risen(Signal::KernelExchangeP99Ms, 2.0, 50.0),
];

const fn risen(signal: Signal, ratio: f64, min_delta: f64) -> Condition {
    Condition {
        signal,
        test: Test::Rises { ratio, min_delta },
        weight: 1.0,
        role: Role::Trigger,
    }
}

/// The verdict for one window under `rules`: the best rank (see [`super::rank`]) among the
/// causes whose own confidence is at least [`MIN_CONFIDENCE`].
#[must_use]
pub fn verdict(rules: &[Rule], ctx: &Ctx<'_>) -> Verdict {
    let mut results: Vec<RuleResult> = rules.iter().map(|r| score(r, ctx)).collect();
    results.extend(super::resources::bottleneck(ctx).map(resource_result));
    let scored: Vec<(Cause, f64)> = results.iter().map(|r| (r.cause, r.confidence())).collect();
    let rank = super::rank::ranks(&scored);
    let order = super::rank::order(&scored, &rank);
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
    Verdict {
        cause: w.cause,
        signature: Some(w.signature.to_owned()),
        confidence: rank[i],
        own_confidence: (rank[i] > w.confidence()).then(|| w.confidence()),
        evidence,
        contrary,
        runners_up: runners_up(Some(i)),
        missing: w.missing.clone(),
    }
}

/// The window's XID errors, one evidence each: `gpu_xid=79 (XID 79 on GPU 0, nvml)`; the
/// kernel's count alone (no event kept) as one `gpu_xids` line.
fn xid_evidence(ctx: &Ctx<'_>) -> Vec<Evidence> {
    let Some(gpu) = ctx.window.gpu.as_ref() else {
        return Vec::new();
    };
    let mut out: Vec<Evidence> = gpu
        .xid_events
        .iter()
        .map(|x| {
            let code = x
                .code
                .map_or_else(|| "unknown".to_owned(), |c| c.to_string());
            let on = x.gpu.map_or_else(String::new, |g| format!(" on GPU {g}"));
            let source = match x.source {
                XidSource::Kernel => "kernel tracepoint",
                XidSource::Nvml => "NVML event",
            };
            Evidence {
                signal: "gpu_xid".to_owned(),
                value: x.code.map_or(0.0, |c| c as f64),
                threshold: 0.0,
                baseline: None,
                met: true,
                note: format!("XID {code}{on} during the rise, {source}"),
            }
        })
        .collect();
    if out.is_empty() && gpu.xids > 0 {
        out.push(Evidence {
            signal: "gpu_xids".to_owned(),
            value: gpu.xids as f64,
            threshold: 0.0,
            baseline: None,
            met: true,
            note: "XID errors during the rise".to_owned(),
        });
    }
    out
}

/// The window's failures by class, largest share first: `error_class_timeout=0.9`.
fn error_classes(ctx: &Ctx<'_>) -> Vec<Evidence> {
    let Some(load) = ctx.window.load.as_ref() else {
        return Vec::new();
    };
    let failed: u64 = load.error_classes.values().sum();
    let mut classes: Vec<(&crate::measure::ErrorClass, &u64)> = load.error_classes.iter().collect();
    classes.sort_by_key(|(_, n)| std::cmp::Reverse(**n));
    classes
        .into_iter()
        .map(|(class, n)| Evidence {
            signal: format!("error_class_{}", class.name()),
            value: *n as f64 / failed.max(1) as f64,
            threshold: 0.0,
            baseline: None,
            met: true,
            note: "share of failed requests".to_owned(),
        })
        .collect()
}

/// `unexplained`: latency rose beyond the baseline's noise and no rule is convincing. The
/// evidence is the rise; `missing` lists every signal any rule wanted and the window lacked.
fn unexplained_verdict(
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
fn none_verdict(results: &[RuleResult], best: f64, runners_up: Vec<CauseScore>) -> Verdict {
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

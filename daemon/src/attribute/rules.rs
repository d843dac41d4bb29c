//! The rule table: per cause, weighted conditions on a window's signals (DESIGN.md,
//! "Attribution", and ebpf-anchors.md section 3 are the source of each signature).
//!
//! A cause's score is the weighted share of its *evaluated* conditions that hold, and only when
//! at least one of its trigger conditions holds: conditions such as "no preemptions" or "ITL
//! flat" also hold in a healthy window, so they may support a cause but never raise one alone.

use super::signals::{Ctx, Signal};
use super::verdict::{Cause, Evidence, fmt_num};

/// A test on one signal.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Test {
    /// value >= x.
    AtLeast(f64),
    /// value > x.
    Above(f64),
    /// value < x.
    Below(f64),
    /// lo <= value <= hi.
    Between(f64, f64),
    /// value >= baseline * ratio and value - baseline >= `min_delta` (both, so that tiny
    /// baselines do not turn noise into a rise).
    Rises {
        /// Factor over the baseline.
        ratio: f64,
        /// Least absolute rise, in the signal's unit.
        min_delta: f64,
    },
    /// value <= baseline * ratio and baseline - value >= `min_delta`.
    Falls {
        /// Factor under the baseline.
        ratio: f64,
        /// Least absolute fall, in the signal's unit.
        min_delta: f64,
    },
    /// value <= baseline * ratio + slack.
    Flat {
        /// Factor over the baseline still called flat.
        ratio: f64,
        /// Absolute slack, in the signal's unit.
        slack: f64,
    },
}

/// One weighted condition of a rule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Condition {
    /// The signal tested.
    pub signal: Signal,
    /// The test.
    pub test: Test,
    /// Its weight in the rule's score.
    pub weight: f64,
    /// A trigger: the rule scores 0 unless one of its triggers holds.
    pub trigger: bool,
}

/// All conditions of one cause.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rule {
    /// The cause the rule names.
    pub cause: Cause,
    /// Its conditions.
    pub conditions: &'static [Condition],
}

const fn trig(signal: Signal, test: Test, weight: f64) -> Condition {
    Condition {
        signal,
        test,
        weight,
        trigger: true,
    }
}

const fn supp(signal: Signal, test: Test, weight: f64) -> Condition {
    Condition {
        signal,
        test,
        weight,
        trigger: false,
    }
}

use Signal as S;
use Test::{Above, AtLeast, Below, Between, Falls, Flat, Rises};

/// The default rule table. Weights: 3-4 for a cause's defining signal, 2 for a signal that
/// separates it from a look-alike (ITL for KV vs queue), 1 for corroboration.
#[rustfmt::skip]
pub const RULES: &[Rule] = &[
    Rule {
        cause: Cause::KvCache,
        conditions: &[
            trig(S::KvUsage, AtLeast(0.95), 3.0),
            trig(S::PreemptionsPerS, Above(0.0), 3.0),
            // Running plateaus below its cap while waiting grows.
            supp(S::RunningShareOfCap, Below(0.95), 1.0),
            supp(S::Waiting, Rises { ratio: 1.5, min_delta: 1.0 }, 1.0),
            supp(S::TtftP99Ms, Rises { ratio: 1.5, min_delta: 20.0 }, 1.0),
            // Recompute after preemption makes ITL tails grow too: this separates it from queueing.
            supp(S::ItlP99Ms, Rises { ratio: 1.3, min_delta: 5.0 }, 2.0),
            // Recompute: prompt tokens rise faster than requests; evictions lower prefix hits.
            supp(S::PromptTokensPerRequest, Rises { ratio: 1.3, min_delta: 0.0 }, 1.0),
            supp(S::PrefixHitRate, Falls { ratio: 0.8, min_delta: 0.05 }, 1.0),
        ],
    },
    Rule {
        cause: Cause::Queue,
        conditions: &[
            trig(S::Waiting, Rises { ratio: 2.0, min_delta: 2.0 }, 2.0),
            trig(S::QueueTimeP95Ms, Rises { ratio: 2.0, min_delta: 20.0 }, 2.0),
            // Absolute: most of TTFT is spent queued, even when the baseline already queued.
            trig(S::QueueShareOfTtft, AtLeast(0.5), 2.0),
            // TTFT grows by about the queue delta.
            supp(S::TtftRiseFromQueue, Between(0.5, 1.5), 2.0),
            supp(S::ItlP99Ms, Flat { ratio: 1.3, slack: 5.0 }, 2.0),
            // A cache with room and no preemptions is what separates admission queueing from
            // KV pressure, which makes requests wait too.
            supp(S::KvUsage, Below(0.9), 2.0),
            supp(S::PreemptionsPerS, Below(0.01), 2.0),
        ],
    },
    Rule {
        cause: Cause::GpuMemory,
        conditions: &[
            // An allocation that returned out-of-memory is close to proof on its own.
            trig(S::GpuOom, Above(0.0), 4.0),
            trig(S::GpuMemUsedFrac, AtLeast(0.97), 2.0),
            supp(S::GpuAllocsAfterWarmup, Above(0.0), 1.0),
            supp(S::GpuAllocChurn, Above(0.0), 1.0),
            supp(S::ErrorRate, Above(0.01), 1.0),
            supp(S::TtftP99Ms, Rises { ratio: 1.5, min_delta: 20.0 }, 1.0),
        ],
    },
    Rule {
        cause: Cause::CpuRunqueue,
        conditions: &[
            // 5 ms: less is noise next to a TTFT of hundreds of ms (seen: a busy engine's own
            // threads at 1-2 ms p99 while its KV cache was the bottleneck).
            trig(S::RunqP99Us, Rises { ratio: 2.0, min_delta: 5000.0 }, 3.0),
            trig(S::RunqMeanUs, Rises { ratio: 2.0, min_delta: 200.0 }, 1.0),
            supp(S::TtftP99Ms, Rises { ratio: 1.3, min_delta: 10.0 }, 3.0),
            // Threads together waited at least a fifth of the window for a CPU.
            supp(S::RunqTotalShare, AtLeast(0.2), 2.0),
            // Frontend time (HTTP, tokenisation) is CPU-bound: it grows with run-queue delay.
            supp(S::FrontendMs, Rises { ratio: 1.5, min_delta: 5.0 }, 2.0),
        ],
    },
    Rule {
        cause: Cause::Network,
        conditions: &[
            trig(S::SrttMeanUs, Rises { ratio: 2.0, min_delta: 1000.0 }, 3.0),
            trig(S::Retransmits, Above(0.0), 2.0),
            trig(S::ClientServerGapMs, Rises { ratio: 1.5, min_delta: 10.0 }, 3.0),
            supp(S::TtftP99Ms, Rises { ratio: 1.3, min_delta: 10.0 }, 1.0),
        ],
    },
    Rule {
        cause: Cause::Loadgen,
        conditions: &[
            // p95, not p99: at tens of requests per window the p99 is the one slowest send, and
            // one send delayed by a hiccup is not a generator that cannot keep up.
            trig(S::SendLagP95Ms, Above(10.0), 4.0),
            trig(S::LoadgenRunqP99Us, Above(5000.0), 2.0),
            supp(S::AchievedShareOfTarget, Below(0.9), 1.0),
        ],
    },
];

/// The outcome of one condition on one window.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Evaluated: the evidence says whether it held.
    Evaluated(Evidence),
    /// The signal (or its baseline) is absent: `signal: reason`.
    Missing(String),
}

impl Condition {
    /// Evaluates the condition on the context's window.
    #[must_use]
    pub fn evaluate(&self, ctx: &Ctx<'_>) -> Outcome {
        let name = self.signal.name();
        let Some(value) = self.signal.value(ctx) else {
            let why = if ctx.baseline.windows.is_empty() {
                "no baseline windows"
            } else {
                self.signal.absent_reason(ctx.window)
            };
            return Outcome::Missing(format!("{name}: {why}"));
        };
        let (met, threshold, baseline, note) = match self.test {
            Test::AtLeast(x) => (value >= x, x, None, format!(">= {}", fmt_num(x))),
            Test::Above(x) => (value > x, x, None, format!("> {}", fmt_num(x))),
            Test::Below(x) => (value < x, x, None, format!("< {}", fmt_num(x))),
            Test::Between(lo, hi) => (
                value >= lo && value <= hi,
                lo,
                None,
                format!("in {}..{}", fmt_num(lo), fmt_num(hi)),
            ),
            Test::Rises { ratio, min_delta }
            | Test::Falls { ratio, min_delta }
            | Test::Flat {
                ratio,
                slack: min_delta,
            } => {
                let Some(b) = ctx.baseline.get(self.signal) else {
                    return Outcome::Missing(format!("{name}: no baseline for this signal"));
                };
                match self.test {
                    Test::Rises { .. } => {
                        let t = (b * ratio).max(b + min_delta);
                        (value >= t, t, Some(b), format!(">= {ratio}x baseline"))
                    }
                    Test::Falls { .. } => {
                        let t = (b * ratio).min(b - min_delta);
                        (value <= t, t, Some(b), format!("<= {ratio}x baseline"))
                    }
                    _ => {
                        let t = b * ratio + min_delta;
                        (
                            value <= t,
                            t,
                            Some(b),
                            format!("<= {ratio}x baseline (flat)"),
                        )
                    }
                }
            }
        };
        Outcome::Evaluated(Evidence {
            signal: name,
            value,
            threshold,
            baseline,
            met,
            note,
        })
    }
}

//! The rule table: per cause, weighted conditions on a window's signals (each signature is
//! described in `docs/explain.md`, "Rules"; adding one in `docs/design.md`).
//!
//! A cause's score is the weighted share of its *evaluated* conditions that hold, and only when
//! at least one of its trigger conditions holds: conditions such as "no preemptions" or "ITL
//! flat" also hold in a healthy window, so they may support a cause but never raise one alone.

use super::baseline::Ctx;
use super::baseline::{Level, NOISE_SIGMAS};
use super::causes::SECOND_CAUSE_MIN_PART;
use super::signals::Signal;
use super::verdict::{Cause, Evidence, Missing, fmt_num};

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
    /// baselines do not turn noise into a rise), and outside the baseline's noise band.
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

/// What a condition does for its rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The rule scores 0 unless at least one of its triggers holds.
    Trigger,
    /// Counts toward the score; never raises the rule alone.
    Support,
    /// Must hold when it can be evaluated: a required condition that fails zeroes the rule
    /// (when its signal is missing, it only lowers the coverage).
    Require,
    /// The cause's own evidence, without which the rule cannot name it: it must be present
    /// and hold (an index rebuild for `vector_index`: a slower tail alone is the load's).
    /// Missing, it zeroes the rule and stays in the verdict's missing evidence, since it could
    /// have changed the verdict.
    Proof,
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
    /// What it does for the rule.
    pub role: Role,
}

/// All conditions of one signature of a cause (a cause may have several: network delay and
/// network loss look nothing alike).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rule {
    /// The cause the rule names.
    pub cause: Cause,
    /// Which signature of the cause, e.g. `loss` (shown with the verdict).
    pub signature: &'static str,
    /// Its conditions.
    pub conditions: &'static [Condition],
}

const fn trig(signal: Signal, test: Test, weight: f64) -> Condition {
    Condition {
        signal,
        test,
        weight,
        role: Role::Trigger,
    }
}

const fn supp(signal: Signal, test: Test, weight: f64) -> Condition {
    Condition {
        signal,
        test,
        weight,
        role: Role::Support,
    }
}

const fn proof(signal: Signal, test: Test, weight: f64) -> Condition {
    Condition {
        signal,
        test,
        weight,
        role: Role::Proof,
    }
}

const fn need(signal: Signal, test: Test, weight: f64) -> Condition {
    Condition {
        signal,
        test,
        weight,
        role: Role::Require,
    }
}

use Signal as S;
use Test::{Above, AtLeast, Below, Between, Falls, Flat, Rises};

/// "Rises" tests on latency: a factor, a least delta, and (always) the baseline's noise band.
const LATENCY_UP: Test = Rises {
    ratio: 1.5,
    min_delta: 10.0,
};

/// How far the share of the time a server's threads wanted a CPU that they spent waiting for
/// one that others held ([`Signal::RunqWaitShare`]) rises over the baseline when others take
/// its CPUs: its CPU-bound work then takes at least 1.25x as long. `cpu_runqueue` needs the
/// rise, `compute` its absence; its own threads waiting behind each other move neither (in CI
/// a 4-stream sim's threads waited 0.33 of the time they wanted a CPU, counted whole; with the
/// waits its own threads ended counted apart, 0.02 -> 0.04 here).
const RUNQ_WAIT_SHARE_RISE: f64 = 0.2;

/// The default rule table. Weights: 3-4 for a cause's defining signal, 2 for a signal that
/// separates it from a look-alike (ITL for KV vs queue), 1 for corroboration. Every relative
/// test also needs the value outside the baseline's noise band ([`super::baseline::NOISE_SIGMAS`]
/// robust deviations), so thresholds follow the baseline, not constants fitted to one server.
#[rustfmt::skip]
pub const RULES: &[Rule] = &[
    Rule {
        cause: Cause::KvCache,
        signature: "server metrics",
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
        cause: Cause::DuplicatePrefill,
        signature: "stampede",
        conditions: &[
            // A good part of the window's requests were sent within one prefill of an identical
            // one: its prefix was not in the cache yet, so each of them computed it again ...
            trig(S::DuplicatePrefillShare, AtLeast(0.3), 2.0),
            // ... and the first token came late (a named cause needs latency off the baseline
            // anyway: these say how much).
            supp(S::TtftP99Ms, Rises { ratio: 1.5, min_delta: 20.0 }, 3.0),
            supp(S::TtftP50Ms, LATENCY_UP, 2.0),
            // The server's prefix cache hit less than at the baseline (where it says).
            supp(S::PrefixHitRate, Falls { ratio: 0.8, min_delta: 0.05 }, 3.0),
            // Not a full cache, not a starved CPU, not the network.
            supp(S::PreemptionsPerS, Below(0.01), 1.0),
            supp(S::RunqP99Us, Flat { ratio: 2.0, slack: 5000.0 }, 1.0),
            supp(S::SrttMeanUs, Flat { ratio: 2.0, slack: 1000.0 }, 1.0),
        ],
    },
    Rule {
        cause: Cause::Queue,
        signature: "server metrics",
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
        cause: Cause::Queue,
        signature: "kernel",
        conditions: &[
            // The kernel's own view of the server's sockets: request in -> first token out.
            trig(S::KernelFirstTokenP50Ms, Rises { ratio: 2.0, min_delta: 5.0 }, 3.0),
            // ... and most of that rise is neither CPU work nor waiting for a CPU: waiting.
            need(S::ServerWaitShare, AtLeast(0.5), 3.0),
            // Not the network: transit and smoothed RTT flat, and nothing retransmitted (a
            // request whose later segment was lost keeps the server waiting for its rest, which
            // reads as waiting here; seen at 15% loss in front of llama-server).
            supp(S::ClientServerGapMs, Flat { ratio: 1.5, slack: 5.0 }, 2.0),
            supp(S::SrttMeanUs, Flat { ratio: 2.0, slack: 1000.0 }, 1.0),
            need(S::Retransmits, Below(1.0), 1.0),
            supp(S::RunqP99Us, Flat { ratio: 2.0, slack: 5000.0 }, 1.0),
            // The server's own metrics corroborate when it has them, and separate admission
            // queueing from a full KV cache, which makes requests wait too.
            supp(S::Waiting, Rises { ratio: 2.0, min_delta: 2.0 }, 1.0),
            supp(S::QueueTimeMeanMs, Rises { ratio: 2.0, min_delta: 5.0 }, 1.0),
            supp(S::KvUsage, Below(0.9), 2.0),
            supp(S::PreemptionsPerS, Below(0.01), 2.0),
        ],
    },
    Rule {
        cause: Cause::Queue,
        signature: "backlog",
        conditions: &[
            // Requests wait before the server even reads them: a listen backlog, a socket no
            // worker reads (sync worker pools admit this way).
            trig(S::ReadDelayMs, Rises { ratio: 2.0, min_delta: 5.0 }, 3.0),
            // ... while the path is as fast as ever and loses nothing: not the network.
            need(S::SrttMeanUs, Flat { ratio: 2.0, slack: 1000.0 }, 2.0),
            need(S::Retransmits, Below(1.0), 1.0),
            supp(S::Waiting, Rises { ratio: 2.0, min_delta: 2.0 }, 1.0),
            supp(S::KvUsage, Below(0.9), 2.0),
            supp(S::PreemptionsPerS, Below(0.01), 2.0),
        ],
    },
    Rule {
        cause: Cause::Compute,
        signature: "saturated",
        conditions: &[
            // Each step takes longer: the client's token gap, the server's own time per token.
            // 1 ms: an engine whose step is 1.6 ms (a small model on a fast CPU or GPU) doubles
            // it by 1.6 ms; a median over thousands of tokens does not move by that on its own.
            trig(S::ItlP50Ms, Rises { ratio: 1.5, min_delta: 1.0 }, 3.0),
            trig(S::ServerTpotMs, Rises { ratio: 1.5, min_delta: 1.0 }, 2.0),
            // ... because the batch grew: more sequences share each step.
            need(S::InFlightMax, Rises { ratio: 1.5, min_delta: 1.0 }, 2.0),
            need(S::BatchMean, Rises { ratio: 1.5, min_delta: 0.5 }, 2.0),
            // Free slots: nothing waits for admission (a saturated engine queues next, and then
            // the verdict is `queue`).
            need(S::Waiting, Flat { ratio: 2.0, slack: 2.0 }, 1.0),
            // The first token costs as many steps as before: the engine is only slower. A
            // request that waits for a slot raises it far more than its steps do.
            need(S::TtftPerItl, Flat { ratio: 2.0, slack: 2.0 }, 2.0),
            // Its own work, not outside contention for its CPUs: the share of the time its
            // threads wanted a CPU that they waited for one others held stays under
            // `cpu_runqueue`'s bar (waits behind its own busier threads do not count).
            need(S::RunqWaitShare, Flat { ratio: 1.0, slack: RUNQ_WAIT_SHARE_RISE }, 1.0),
            // The serving process busy (on a CPU, or blocked on its device), a cache with room
            // and no preemptions.
            supp(S::EngineBusyShare, AtLeast(0.8), 1.0),
            supp(S::GpuSyncPerLaunchMs, Rises { ratio: 1.5, min_delta: 1.0 }, 2.0),
            supp(S::KvUsage, Below(0.9), 1.0),
            supp(S::PreemptionsPerS, Below(0.01), 1.0),
        ],
    },
    Rule {
        cause: Cause::GpuMemory,
        signature: "allocations",
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
        cause: Cause::GpuThrottle,
        signature: "clocks",
        conditions: &[
            // NVML's clock event reasons: a power cap or a thermal limit holds the clocks down
            // in this window and did not in the baseline, so it coincides with the rise.
            trig(S::GpuThrottleShare, Rises { ratio: 2.0, min_delta: 0.25 }, 4.0),
            // ... the clocks are lower for it, at the cap when it is the power's.
            supp(S::GpuSmClockMhz, Falls { ratio: 0.95, min_delta: 50.0 }, 2.0),
            supp(S::GpuPowerShareOfCap, AtLeast(0.95), 1.0),
            // Each step takes longer: the token gap and the server's own time per token.
            supp(S::ItlP50Ms, Rises { ratio: 1.3, min_delta: 1.0 }, 2.0),
            supp(S::ServerTpotMs, Rises { ratio: 1.3, min_delta: 1.0 }, 1.0),
            supp(S::E2eP50Ms, LATENCY_UP, 1.0),
        ],
    },
    Rule {
        cause: Cause::CpuRunqueue,
        signature: "run queue",
        conditions: &[
            // 5 ms: less is noise next to a TTFT of hundreds of ms (seen: a busy engine's own
            // threads at 1-2 ms p99 while its KV cache was the bottleneck).
            trig(S::RunqP99Us, Rises { ratio: 2.0, min_delta: 5000.0 }, 3.0),
            trig(S::RunqMeanUs, Rises { ratio: 2.0, min_delta: 200.0 }, 1.0),
            // Others take its CPUs: its threads spend a larger share of the time they want a
            // CPU waiting for one others hold (two equal-priority busy loops on its CPU: 0.07 ->
            // 0.69). Its own busier threads waiting behind each other raise the p99 and the
            // mean, not this share.
            need(
                S::RunqWaitShare,
                Rises { ratio: 1.0, min_delta: RUNQ_WAIT_SHARE_RISE },
                2.0,
            ),
            supp(S::TtftP99Ms, Rises { ratio: 1.3, min_delta: 10.0 }, 3.0),
            // Threads together waited at least a fifth of the window for a CPU.
            supp(S::RunqTotalShare, AtLeast(0.2), 2.0),
            // Frontend time (HTTP, tokenisation) is CPU-bound: it grows with run-queue delay.
            supp(S::FrontendMs, Rises { ratio: 1.5, min_delta: 5.0 }, 2.0),
        ],
    },
    Rule {
        cause: Cause::Network,
        signature: "delay",
        conditions: &[
            trig(S::SrttMeanUs, Rises { ratio: 2.0, min_delta: 1000.0 }, 3.0),
            // Transit alone is no trigger: with the RTT flat, a request that waits long before
            // the server reads it waits in the server's backlog (`queue`, backlog). And a
            // longer RTT reaches requests only through their transit: where it was measured and
            // did not rise, the RTT grew on the hosts (a busy server acking late on loopback:
            // 0.1 -> 2.5 ms while its queue held requests for 19 s), not on the path.
            need(S::ClientServerGapMs, Rises { ratio: 1.5, min_delta: 10.0 }, 3.0),
            // The path is why latency rose only where its time is a part of the rise a phase
            // would name: a queue draining seconds of wait beside a 40 ms stall is the queue's.
            need(S::TransitShareOfRise, AtLeast(SECOND_CAUSE_MIN_PART), 2.0),
            // A congested queue overflows: drops come with the delay.
            supp(S::Retransmits, Above(0.0), 1.0),
            supp(S::TtftP99Ms, Rises { ratio: 1.3, min_delta: 10.0 }, 1.0),
            supp(S::E2eP99Ms, Rises { ratio: 1.3, min_delta: 10.0 }, 1.0),
        ],
    },
    Rule {
        cause: Cause::Network,
        signature: "transit stall",
        conditions: &[
            // Written by the server, read late by the client, with the request itself read
            // promptly (not a backlog): the first token sat in a socket queue. With the RTT flat
            // this is the TCP stack, e.g. a small write held by Nagle until the peer's delayed
            // ACK (40 ms on Linux).
            trig(S::ClientServerGapMs, Rises { ratio: 1.5, min_delta: 10.0 }, 3.0),
            need(S::ReadDelayMs, Flat { ratio: 1.5, slack: 5.0 }, 2.0),
            need(S::TransitShareOfRise, AtLeast(SECOND_CAUSE_MIN_PART), 2.0),
            supp(S::TtftP50Ms, LATENCY_UP, 1.0),
            supp(S::TtftP99Ms, LATENCY_UP, 1.0),
        ],
    },
    Rule {
        cause: Cause::Network,
        signature: "loss",
        conditions: &[
            // Requests of this window whose connection retransmitted while they were in flight
            // (the retransmit itself may fall in the next window).
            trig(S::LossHitShare, Above(0.0), 2.0),
            // Loss hurts the few requests it hits: theirs against the others' latency, not a
            // window median.
            need(S::LossSlowdown, AtLeast(1.5), 3.0),
            supp(S::Retransmits, Above(0.0), 1.0),
            supp(S::TtftP99Ms, LATENCY_UP, 1.0),
            supp(S::ItlP99Ms, LATENCY_UP, 1.0),
            supp(S::E2eP99Ms, LATENCY_UP, 1.0),
        ],
    },
    Rule {
        cause: Cause::Loadgen,
        signature: "send lag",
        conditions: &[
            // p95, not p99: at tens of requests per window the p99 is the one slowest send, and
            // one send delayed by a hiccup is not a generator that cannot keep up.
            trig(S::SendLagP95Ms, Above(10.0), 4.0),
            trig(S::LoadgenRunqP99Us, Above(5000.0), 2.0),
            supp(S::AchievedShareOfTarget, Below(0.9), 1.0),
        ],
    },
    Rule {
        cause: Cause::Loadgen,
        signature: "unsent",
        conditions: &[
            // Arrivals the generator never sent, in the windows that fell short (the signal
            // exists only there): the most extreme lag of all.
            trig(S::UnsentArrivals, Above(0.0), 4.0),
        ],
    },
    Rule {
        cause: Cause::VectorIndex,
        signature: "recall",
        conditions: &[
            need(S::VectorShare, AtLeast(1.0), 1.0),
            // The index answers worse: the client's recall is the index's own evidence.
            trig(S::RecallMean, Falls { ratio: 0.97, min_delta: 0.02 }, 3.0),
            supp(S::E2eP99Ms, Rises { ratio: 3.0, min_delta: 20.0 }, 1.0),
            supp(S::PhaseEvents, Above(0.0), 1.0),
        ],
    },
    Rule {
        cause: Cause::VectorIndex,
        signature: "tail",
        conditions: &[
            need(S::VectorShare, AtLeast(1.0), 1.0),
            trig(S::E2eP99Ms, Rises { ratio: 3.0, min_delta: 20.0 }, 3.0),
            // The service says its index was being rebuilt: without that evidence a slower
            // tail is the load's (queueing, CPUs), not the index's.
            proof(S::IndexRebuild, Above(0.0), 3.0),
            // A rebuild (or any operator action) sent in this phase before the tail.
            supp(S::PhaseEvents, Above(0.0), 2.0),
            // Not the CPU, not the network.
            supp(S::RunqP99Us, Flat { ratio: 2.0, slack: 5000.0 }, 1.0),
            supp(S::SrttMeanUs, Flat { ratio: 2.0, slack: 1000.0 }, 1.0),
        ],
    },
    Rule {
        cause: Cause::VectorIndex,
        signature: "server tail",
        conditions: &[
            // What the node agent sees of a vector service without any client's records: most
            // of its exchanges were searches (its own counter over the kernel's count; health
            // checks and admin calls are the rest) ...
            need(S::VectorShare, AtLeast(0.5), 1.0),
            // ... its slowest answers, as the kernel timed them on its sockets, ...
            trig(S::KernelExchangeP99Ms, Rises { ratio: 3.0, min_delta: 20.0 }, 3.0),
            // ... while it says its index was being rebuilt: without that evidence a slower tail
            // is the load's (queueing, CPUs), not the index's.
            proof(S::IndexRebuild, Above(0.0), 3.0),
            supp(S::RunqP99Us, Flat { ratio: 2.0, slack: 5000.0 }, 1.0),
            supp(S::SrttMeanUs, Flat { ratio: 2.0, slack: 1000.0 }, 1.0),
        ],
    },
    Rule {
        cause: Cause::Errors,
        signature: "failures",
        conditions: &[
            trig(S::ErrorRate, AtLeast(0.2), 3.0),
        ],
    },
];

/// The outcome of one condition on one window.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Evaluated: the evidence says whether it held.
    Evaluated(Evidence),
    /// The signal (or its baseline) is absent.
    Missing(Missing),
    /// The signal cannot exist for the window's requests (a first token of a vector search,
    /// see [`super::signals::Signal::applies_to`]): neither evidence nor missing.
    Inapplicable,
}

impl Condition {
    /// Evaluates the condition on the context's window.
    #[must_use]
    pub fn evaluate(&self, ctx: &Ctx<'_>) -> Outcome {
        // A signal the window's requests cannot have is no part of the rule there, even where
        // a value exists (an engine's exchange tail is not a vector index's).
        if !self.signal.applies_in(ctx.window) {
            return Outcome::Inapplicable;
        }
        let name = self.signal.name();
        let Some(value) = self.signal.value(ctx) else {
            let why = if ctx.baseline.windows.is_empty() {
                "no baseline windows"
            } else {
                self.signal.absent_reason(ctx.window)
            };
            return Outcome::Missing(Missing::new(name, why));
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
                let Some(level) = ctx.baseline.level(self.signal) else {
                    return Outcome::Missing(Missing::new(name, "no baseline for this signal"));
                };
                let Level { median: b, spread } = level;
                let noise = NOISE_SIGMAS * spread;
                match self.test {
                    Test::Rises { .. } => {
                        let t = level.risen_bar(ratio, min_delta);
                        (value >= t, t, Some(b), format!(">= {ratio}x baseline"))
                    }
                    Test::Falls { .. } => {
                        let t = (b * ratio).min(b - min_delta).min(b - noise);
                        (value <= t, t, Some(b), format!("<= {ratio}x baseline"))
                    }
                    _ => {
                        let t = (b * ratio + min_delta).max(b + noise);
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

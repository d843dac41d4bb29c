//! What attribution says about a window: the cause, how sure it is, and the evidence.

use serde::{Deserialize, Serialize};

/// A bottleneck attribution can name, or `None` when nothing explains the window.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// KV-cache pressure: the cache is full, requests are preempted and recomputed.
    KvCache,
    /// The same prompt prefilled several times at once: identical requests arrived together
    /// (a stampede on a hot prompt whose cached prefix expired) before the first one's prefill
    /// was done, so the prefix cache could serve none of them.
    DuplicatePrefill,
    /// GPU memory outside the KV cache: allocations fail or the device is full.
    GpuMemory,
    /// The GPU runs below its clocks: a power cap or a thermal limit slows it (NVML's clock
    /// event reasons) while latency rises.
    GpuThrottle,
    /// Queueing/admission: requests wait for a batch slot while the GPU keeps up per token.
    Queue,
    /// The engine's compute is saturated: each step takes longer as the batch grows, with free
    /// slots, room in the KV cache and its CPUs to itself.
    Compute,
    /// The server's threads wait for a CPU.
    CpuRunqueue,
    /// The network path between client and server.
    Network,
    /// The load generator itself lags: the window's latencies are not trustworthy.
    Loadgen,
    /// A vector index behind the latency tail: a rebuild, or recall falling.
    VectorIndex,
    /// Requests fail: the window's latencies describe what little succeeded.
    Errors,
    /// Latency rose beyond the baseline's noise and no cause is convincing: the verdict names
    /// what evidence was missing.
    Unexplained,
    /// Latency is at the baseline.
    None,
}

impl Cause {
    /// Every cause, in the order reports list them.
    pub const ALL: [Cause; 13] = [
        Cause::KvCache,
        Cause::DuplicatePrefill,
        Cause::GpuMemory,
        Cause::GpuThrottle,
        Cause::Queue,
        Cause::Compute,
        Cause::CpuRunqueue,
        Cause::Network,
        Cause::Loadgen,
        Cause::VectorIndex,
        Cause::Errors,
        Cause::Unexplained,
        Cause::None,
    ];

    /// The `snake_case` name used in JSON, the terminal and the HTML report.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Cause::KvCache => "kv_cache",
            Cause::DuplicatePrefill => "duplicate_prefill",
            Cause::GpuMemory => "gpu_memory",
            Cause::GpuThrottle => "gpu_throttle",
            Cause::Queue => "queue",
            Cause::Compute => "compute",
            Cause::CpuRunqueue => "cpu_runqueue",
            Cause::Network => "network",
            Cause::Loadgen => "loadgen",
            Cause::VectorIndex => "vector_index",
            Cause::Errors => "errors",
            Cause::Unexplained => "unexplained",
            Cause::None => "none",
        }
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One signal's value against the test a rule put on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Evidence {
    /// Signal name, e.g. `kv_usage` or `ttft_p99_ms`.
    pub signal: String,
    /// Its value in the window.
    pub value: f64,
    /// The threshold the test compared against (for baseline tests: baseline scaled by the
    /// test's ratio).
    pub threshold: f64,
    /// The same signal in the baseline, for tests relative to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<f64>,
    /// Whether the test held.
    pub met: bool,
    /// The test in words, e.g. `>= 0.95` or `>= 1.5x baseline`.
    pub note: String,
}

impl Evidence {
    /// One short line: `kv_usage=0.98 (>= 0.95)`.
    #[must_use]
    pub fn line(&self) -> String {
        let v = fmt_num(self.value);
        match self.baseline {
            Some(b) => format!(
                "{}={v} ({}, baseline {})",
                self.signal,
                self.note,
                fmt_num(b)
            ),
            None => format!("{}={v} ({})", self.signal, self.note),
        }
    }
}

/// Compact number formatting for evidence lines.
#[must_use]
pub fn fmt_num(v: f64) -> String {
    let a = v.abs();
    if a < 0.005 {
        "0".to_owned()
    } else if a >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// How a cause scored in one window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CauseScore {
    /// The cause.
    pub cause: Cause,
    /// Weighted share of the rule's evaluated conditions that held, 0..1.
    pub score: f64,
    /// Its rank (`attribute::rank`): the score lowered by the share of the rule's conditions
    /// that could not be evaluated, raised to the rank of any convincing cause it explains.
    pub confidence: f64,
    /// The winner that explains this cause's symptoms ([`Cause`] precedence, see
    /// `docs/explain.md`): why a runner-up with the same rank lost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explained_by: Option<Cause>,
}

/// The verdict for one window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Verdict {
    /// The named cause (`none` when no rule is convincing).
    pub cause: Cause,
    /// Which of the cause's signatures decided it (e.g. `loss` for `network`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// The cause's rank, 0..1: its rule's confidence, raised to the rank of any convincing cause
    /// it explains (so no runner-up ranks above the winner).
    pub confidence: f64,
    /// The winning rule's own confidence, when it is below `confidence` (the rank was carried
    /// from a cause it explains).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub own_confidence: Option<f64>,
    /// The conditions of the winning rule that held: what decided it.
    pub evidence: Vec<Evidence>,
    /// The winning rule's conditions that were evaluated and did not hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub contrary: Vec<Evidence>,
    /// The other causes that scored above zero, best first.
    pub runners_up: Vec<CauseScore>,
    /// Signals the rules wanted but the window lacks (e.g. `kv_usage: no server metrics`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<Missing>,
}

/// A signal a rule (or the decomposition) wanted and did not have, and why. In reports it is
/// one line, `signal: reason` (`kv_usage: no server metrics`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(from = "String", into = "String")]
pub struct Missing {
    /// The signal's name (`Signal::name`), or a part of the decomposition.
    pub signal: String,
    /// Why it is absent: its source is off, or the source does not report it.
    pub reason: String,
}

impl Missing {
    /// `signal` is absent because of `reason`.
    pub fn new(signal: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            signal: signal.into(),
            reason: reason.into(),
        }
    }
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.signal, self.reason)
    }
}

impl From<String> for Missing {
    fn from(line: String) -> Self {
        match line.split_once(": ") {
            Some((signal, reason)) => Self::new(signal, reason),
            None => Self::new("", line),
        }
    }
}

impl From<Missing> for String {
    fn from(m: Missing) -> Self {
        m.to_string()
    }
}

impl Verdict {
    /// `cause` at `confidence` and nothing else (no signature, evidence or runner-up): a
    /// verdict as a fixture or a replay states it.
    #[must_use]
    pub fn bare(cause: Cause, confidence: f64) -> Self {
        Self {
            cause,
            signature: None,
            confidence,
            own_confidence: None,
            evidence: Vec::new(),
            contrary: Vec::new(),
            runners_up: Vec::new(),
            missing: Vec::new(),
        }
    }

    /// The evidence in one line: `kv_usage=0.98 (>= 0.95); preemptions_per_s=3 (> 0)`.
    #[must_use]
    pub fn evidence_line(&self) -> String {
        self.evidence
            .iter()
            .map(Evidence::line)
            .collect::<Vec<_>>()
            .join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_serialise_snake_case() {
        let names: Vec<String> = Cause::ALL
            .iter()
            .map(|c| serde_json::to_string(c).unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "\"kv_cache\"",
                "\"duplicate_prefill\"",
                "\"gpu_memory\"",
                "\"gpu_throttle\"",
                "\"queue\"",
                "\"compute\"",
                "\"cpu_runqueue\"",
                "\"network\"",
                "\"loadgen\"",
                "\"vector_index\"",
                "\"errors\"",
                "\"unexplained\"",
                "\"none\""
            ]
        );
        for c in Cause::ALL {
            assert_eq!(
                serde_json::to_string(&c).unwrap(),
                format!("\"{}\"", c.name())
            );
        }
    }

    #[test]
    fn evidence_line_shows_baseline() {
        let e = Evidence {
            signal: "ttft_p99_ms".into(),
            value: 812.4,
            threshold: 300.0,
            baseline: Some(150.0),
            met: true,
            note: ">= 2x baseline".into(),
        };
        assert_eq!(e.line(), "ttft_p99_ms=812 (>= 2x baseline, baseline 150)");
        assert_eq!(fmt_num(0.981), "0.98");
        assert_eq!(fmt_num(12.34), "12.3");
    }
}

//! The run report: aggregates per phase (with mergeable histograms), SLO results and
//! the per-request records. Its JSON form is versioned; see `docs/stress.md`.

use std::{collections::BTreeMap, fmt::Write as _, path::Path};

use serde::{Deserialize, Serialize};

use super::{
    metrics::{HISTS, PhaseMetrics, Summary, encode_hist},
    record::{ErrorClass, RequestRecord},
    shard::Shard,
    slo::SloResult,
};

/// `schema` field of every report.
pub const SCHEMA: &str = "inferscope.stress.report";
/// Current report version; bumped on any incompatible change.
pub const VERSION: u32 = 1;

/// Counters of a phase.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Counts {
    /// Requests the schedule asked for (open loop) or started (closed loop).
    pub scheduled: u64,
    /// Dropped because a cap was hit (`when_capped: drop`), or held by a cap (`wait`) past the
    /// phase's end and never sent.
    pub dropped: u64,
    /// Finished, ok or not.
    pub finished: u64,
    /// Succeeded.
    pub ok: u64,
    /// Succeeded and met every per-request SLO.
    pub good: u64,
    /// Failures by class (`connect`, `timeout`, `http_status`, ...).
    pub errors: BTreeMap<String, u64>,
}

/// One phase of the report.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct PhaseReport {
    /// Phase name.
    pub name: String,
    /// Label `scenario` (baseline, soak, burst...).
    pub label: String,
    /// Label `endpoint`.
    pub endpoint: String,
    /// Label `load_level` (`rate=20/s`, `concurrency=32`).
    pub load_level: String,
    /// Mean target rate (open loop).
    pub target_rate: Option<f64>,
    /// Configured duration, seconds.
    pub duration_s: f64,
    /// Time actually spent sending (shorter when interrupted), seconds.
    pub elapsed_s: f64,
    /// Counters.
    pub counts: Counts,
    /// Failed / finished (intentional chaos aborts excluded).
    pub error_rate: f64,
    /// Finished requests per second.
    pub requests_per_s: f64,
    /// Good requests per second (goodput).
    pub goodput_per_s: f64,
    /// Output tokens of all requests.
    pub output_tokens: u64,
    /// Output tokens per second.
    pub output_tokens_per_s: f64,
    /// Prompt tokens (from usage).
    pub input_tokens: u64,
    /// Input plus output tokens per second (token QPS).
    #[serde(default)]
    pub tokens_per_s: f64,
    /// Tasks that ended (single requests; conversations that completed or failed).
    #[serde(default)]
    pub tasks: u64,
    /// Tasks that succeeded (no error, every answer passed `check:`).
    #[serde(default)]
    pub tasks_succeeded: u64,
    /// Semantic throughput: succeeded tasks per second (sTPS).
    #[serde(default)]
    pub semantic_tasks_per_s: f64,
    /// Inference consistency entropy per conversation (nats; conversations with logprobs).
    #[serde(default)]
    pub ice: Summary,
    /// Retries, outages and the MSR (phases with a retry policy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resilience: Option<super::resilience::Resilience>,
    /// Latency summaries in milliseconds: ttft, itl, tpot, e2e (from intended start),
    /// `e2e_from_send` (uncorrected, for comparison), `send_lag`.
    pub latency_ms: BTreeMap<String, Summary>,
    /// Per-stream decode rate, tokens/s.
    pub stream_tokens_per_s: Summary,
    /// recall@k of sampled vector queries (fraction).
    pub recall: Summary,
    /// Base64 `HdrHistogram` V2 of each series (latencies in µs; `stream_tokens_per_s` in
    /// tokens/s x 1000; `recall` in recall x 10000 + 1). Merge these, not the summaries.
    pub histograms: BTreeMap<String, String>,
    /// SLO outcomes.
    pub slo: Vec<SloResult>,
}

/// A one-off request made by a phase's `events:`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct EventRecord {
    /// Phase index.
    pub phase: u32,
    /// `METHOD path`.
    pub request: String,
    /// Sent at (µs since run start).
    pub at_us: u64,
    /// Finished at (µs since run start).
    pub end_us: u64,
    /// HTTP status or error text.
    pub outcome: String,
}

/// The whole run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Report {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// [`VERSION`].
    pub version: u32,
    /// Scenario name.
    pub scenario: String,
    /// Target base URL.
    pub target: String,
    /// The share of the load this run produced (`--shard i/N`); absent for the whole load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<Shard>,
    /// Run start, Unix time in ns (record times are offsets from it).
    pub started_unix_ns: u64,
    /// Run start on `CLOCK_MONOTONIC` in ns (the clock of eBPF's `bpf_ktime_get_ns`).
    pub started_monotonic_ns: u64,
    /// Wall time of the whole run, seconds.
    pub elapsed_s: f64,
    /// Why the run stopped early (Ctrl-C, error-rate abort), if it did.
    pub stopped: Option<String>,
    /// Every SLO of every phase held.
    pub slo_pass: bool,
    /// Phases in run order.
    pub phases: Vec<PhaseReport>,
    /// Requests made by `events:`.
    pub events: Vec<EventRecord>,
    /// Every request (empty when records were not kept), up to the records' memory budget.
    pub records: Vec<RequestRecord>,
    /// Records left out of `records` once the budget was spent (`Options::records_budget`);
    /// the phases' metrics still count them.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub records_overflow: u64,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Static facts of a phase needed for its report.
pub struct PhaseInfo {
    /// Name.
    pub name: String,
    /// Label.
    pub label: String,
    /// Endpoint label.
    pub endpoint: String,
    /// Load level label.
    pub load_level: String,
    /// Mean target rate.
    pub target_rate: Option<f64>,
    /// Configured duration, s.
    pub duration_s: f64,
    /// Actual sending time, s.
    pub elapsed_s: f64,
    /// SLOs.
    pub slos: Vec<super::slo::Slo>,
    /// `T_max` (ms) of the phase's retry policy; `None` without one (or after a merge:
    /// shards' outages do not add up).
    pub retry_t_max_ms: Option<f64>,
}

impl PhaseReport {
    /// Builds the report of one phase and checks its SLOs.
    #[must_use]
    pub fn build(info: &PhaseInfo, m: &PhaseMetrics) -> Self {
        let el = info.elapsed_s.max(1e-9);
        let slo = info
            .slos
            .iter()
            .map(|s| {
                let observed = m.value(s.metric, el);
                SloResult {
                    slo: s.text.clone(),
                    observed,
                    pass: observed.is_some_and(|v| s.holds(v)),
                }
            })
            .collect();
        let errors = ErrorClass::ALL
            .iter()
            .filter_map(|c| m.errors.get(c).map(|n| (c.name().to_string(), *n)))
            .collect();
        PhaseReport {
            name: info.name.clone(),
            label: info.label.clone(),
            endpoint: info.endpoint.clone(),
            load_level: info.load_level.clone(),
            target_rate: info.target_rate,
            duration_s: info.duration_s,
            elapsed_s: info.elapsed_s,
            counts: Counts {
                scheduled: m.scheduled,
                dropped: m.dropped,
                finished: m.finished,
                ok: m.ok,
                good: m.good,
                errors,
            },
            error_rate: m.error_rate(),
            requests_per_s: m.finished as f64 / el,
            goodput_per_s: m.good as f64 / el,
            output_tokens: m.output_tokens,
            output_tokens_per_s: m.output_tokens as f64 / el,
            tokens_per_s: (m.input_tokens + m.output_tokens) as f64 / el,
            tasks: m.tasks,
            tasks_succeeded: m.tasks_ok,
            semantic_tasks_per_s: m.tasks_ok as f64 / el,
            ice: m.summary("ice"),
            resilience: info.retry_t_max_ms.map(|t| m.resilience.finish(t)),
            input_tokens: m.input_tokens,
            latency_ms: ["ttft", "itl", "tpot", "e2e", "e2e_from_send", "send_lag"]
                .iter()
                .map(|n| ((*n).to_string(), m.summary(n)))
                // Per-turn TTFT only for conversations.
                .chain(
                    ["ttft_first_turn", "ttft_later_turns"]
                        .iter()
                        .map(|n| ((*n).to_string(), m.summary(n)))
                        .filter(|(_, s)| s.count > 0),
                )
                .collect(),
            stream_tokens_per_s: m.summary("stream_tokens_per_s"),
            recall: m.summary("recall"),
            histograms: HISTS
                .iter()
                .map(|n| ((*n).to_string(), encode_hist(&m.hists[n])))
                .collect(),
            slo,
        }
    }
}

impl Report {
    /// Writes the JSON report (pretty-printed) to `path`.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        // Complete or absent: a temporary file beside it, flushed, synced and renamed.
        crate::export::atomic::write_atomic(path, |w| {
            serde_json::to_writer(w, self).map_err(std::io::Error::other)
        })
    }

    /// The terminal table: one row per phase, then failed SLOs.
    #[must_use]
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{:<16} {:<18} {:>8} {:>7} {:>6} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>5}",
            "phase",
            "load",
            "finished",
            "err%",
            "drop",
            "req/s",
            "tok/s",
            "ttft p50",
            "ttft p99",
            "itl p99",
            "e2e p99",
            "lag p99",
            "slo"
        );
        for p in &self.phases {
            let l = |n: &str, f: fn(&Summary) -> f64| {
                p.latency_ms
                    .get(n)
                    .filter(|s| s.count > 0)
                    .map_or_else(|| "-".into(), |s| fmt_ms(f(s)))
            };
            let slo = if p.slo.is_empty() {
                "-"
            } else if p.slo.iter().all(|r| r.pass) {
                "pass"
            } else {
                "FAIL"
            };
            let _ = writeln!(
                s,
                "{:<16} {:<18} {:>8} {:>6.2}% {:>6} {:>7.1} {:>9.0} {:>9} {:>9} {:>9} {:>9} {:>9} {:>5}",
                p.name,
                p.load_level,
                p.counts.finished,
                p.error_rate * 100.0,
                p.counts.dropped,
                p.requests_per_s,
                p.output_tokens_per_s,
                l("ttft", |s| s.p50),
                l("ttft", |s| s.p99),
                l("itl", |s| s.p99),
                l("e2e", |s| s.p99),
                l("send_lag", |s| s.p99),
                slo
            );
            if !p.counts.errors.is_empty() {
                let errs: Vec<String> = p
                    .counts
                    .errors
                    .iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect();
                let _ = writeln!(s, "  errors: {}", errs.join(", "));
            }
            if p.recall.count > 0 {
                let _ = writeln!(
                    s,
                    "  recall@k: mean {:.3}, p50 {:.3} over {} sampled queries",
                    p.recall.mean, p.recall.p50, p.recall.count
                );
            }
            conversation_lines(&mut s, p);
            for r in p.slo.iter().filter(|r| !r.pass) {
                let obs = r
                    .observed
                    .map_or_else(|| "no data".into(), |v| format!("{v:.3}"));
                let _ = writeln!(s, "  SLO failed: {} (observed {obs})", r.slo);
            }
        }
        if let Some(why) = &self.stopped {
            let _ = writeln!(s, "stopped early: {why}");
        }
        s
    }
}

fn fmt_ms(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.1}s", v / 1000.0)
    } else if v >= 10.0 {
        format!("{v:.0}ms")
    } else {
        format!("{v:.2}ms")
    }
}

/// The lines of tasks (checks, conversations), per-turn TTFT and ICE, when a phase has them.
fn conversation_lines(s: &mut String, p: &PhaseReport) {
    // Semantic throughput where tasks are more than requests (checks, conversations).
    if p.tasks_succeeded < p.tasks || p.tasks < p.counts.finished {
        let _ = writeln!(
            s,
            "  tasks: {} of {} succeeded, sTPS {:.2}; token QPS {:.0} (input + output)",
            p.tasks_succeeded, p.tasks, p.semantic_tasks_per_s, p.tokens_per_s
        );
    }
    if let (Some(first), Some(later)) = (
        p.latency_ms.get("ttft_first_turn"),
        p.latency_ms.get("ttft_later_turns"),
    ) {
        let _ = writeln!(
            s,
            "  TTFT p50 turn 1 {}, later turns {}",
            fmt_ms(first.p50),
            fmt_ms(later.p50)
        );
    }
    if let Some(r) = &p.resilience {
        let _ = writeln!(
            s,
            "  resilience: MSR {:.2} ({}): failover {:.0} ms of T_max {:.0} over {} outages{}, retries {} of {} succeeded",
            r.msr,
            r.grade.name(),
            r.failover_ms,
            r.t_max_ms,
            r.outages,
            if r.unrecovered { " (unrecovered)" } else { "" },
            r.retries_succeeded,
            r.retries
        );
    }
    if p.ice.count > 0 {
        let _ = writeln!(
            s,
            "  ICE (std of turn entropies): p50 {:.3}, p95 {:.3} nats over {} conversations",
            p.ice.p50, p.ice.p95, p.ice.count
        );
    }
}

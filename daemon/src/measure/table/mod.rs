//! The terminal table of a stress report: one row per phase, its extra lines (errors,
//! resends, recall, vector view, tasks and conversations, failed SLOs), then the sweep
//! frontiers.

pub mod pipeline;
pub mod session;
pub mod vector;

use std::fmt::Write as _;

use super::{
    report::{PhaseReport, StressReport},
    slo::SloResult,
};

impl StressReport {
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
            let l = |n: &str, pct: &str| {
                p.latency_ms.get(n).filter(|s| s.count > 0).map_or_else(
                    || "-".into(),
                    |s| match s.percentile(pct) {
                        Some(_) if s.is_too_few(pct) => "too few".into(),
                        Some(v) => fmt_ms(v),
                        None => "-".into(),
                    },
                )
            };
            let slo = if p.slo.is_empty() {
                "-"
            } else if p.slo.iter().any(|r| !r.pass && !r.undecided()) {
                "FAIL"
            } else if p.slo.iter().any(SloResult::undecided) {
                "few"
            } else {
                "pass"
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
                l("ttft", "p50"),
                l("ttft", "p99"),
                l("itl", "p99"),
                l("e2e", "p99"),
                l("send_lag", "p99"),
                slo
            );
            too_few_line(&mut s, p);
            steady_line(&mut s, p);
            count_lines(&mut s, p);
            if p.recall.count > 0 {
                let _ = writeln!(
                    s,
                    "  recall@k: mean {:.3}, p50 {:.3} over {} sampled queries",
                    p.recall.mean, p.recall.p50, p.recall.count
                );
            }
            if let Some(v) = &p.vector {
                vector::lines(&mut s, p, v);
            }
            conversation_lines(&mut s, p);
            for r in p.slo.iter().filter(|r| !r.gate_passes()) {
                let obs = r
                    .observed
                    .map_or_else(|| "no data".into(), |v| format!("{v:.3}"));
                match (r.samples, r.samples_needed) {
                    (Some(n), Some(needed)) => {
                        let _ = writeln!(
                            s,
                            "  SLO undecided: {}: too few samples ({n} of the {needed} it needs; observed {obs})",
                            r.slo
                        );
                    }
                    _ => {
                        let _ = writeln!(s, "  SLO failed: {} (observed {obs})", r.slo);
                    }
                }
            }
        }
        vector::frontiers(&mut s, &self.phases);
        if let Some(why) = &self.stopped {
            let _ = writeln!(s, "stopped early: {why}");
        }
        s
    }
}

/// Says which of the table's p99 columns had too few samples to be a number, and how many a
/// p99 needs (`confidence.rs`).
fn too_few_line(s: &mut String, p: &PhaseReport) {
    let few: Vec<String> = ["ttft", "itl", "e2e", "send_lag"]
        .into_iter()
        .filter_map(|n| {
            let sum = p.latency_ms.get(n).filter(|x| x.count > 0)?;
            sum.is_too_few("p99")
                .then(|| format!("{n} from {} samples", sum.count))
        })
        .collect();
    if !few.is_empty() {
        let _ = writeln!(
            s,
            "  too few samples for a p99 ({}): a p99 needs {}",
            few.join(", "),
            super::confidence::needed(0.99)
        );
    }
}

/// The phase's steady state beside the whole phase, when it is a part of it (`steady.rs`).
fn steady_line(s: &mut String, p: &PhaseReport) {
    let Some(st) = p
        .steady
        .as_ref()
        .filter(|st| st.to_s - st.from_s < 0.95 * st.sending_s)
    else {
        return;
    };
    let pct = |n: &str| {
        st.latency_ms.get(n).map_or_else(String::new, |x| {
            let v = |q: &str| {
                if x.is_too_few(q) {
                    "too few".to_owned()
                } else {
                    x.percentile(q).map_or_else(String::new, fmt_ms)
                }
            };
            format!(", {n} p50 {} p99 {}", v("p50"), v("p99"))
        })
    };
    let _ = writeln!(
        s,
        "  steady state {:.1}-{:.1}s of {:.1}s ({:.0} in flight, {}): {} requests{}{}",
        st.from_s,
        st.to_s,
        st.sending_s,
        st.in_flight,
        st.basis,
        st.requests,
        pct("ttft"),
        pct("e2e")
    );
}

/// A latency in ms as the table prints it.
#[must_use]
pub fn fmt_ms(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.1}s", v / 1000.0)
    } else if v >= 10.0 {
        format!("{v:.0}ms")
    } else {
        format!("{v:.2}ms")
    }
}

/// The lines of a phase's counts beyond the table's: errors, chaos, resends, connects.
fn count_lines(s: &mut String, p: &PhaseReport) {
    if !p.counts.errors.is_empty() {
        let errs: Vec<String> = p
            .counts
            .errors
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(s, "  errors: {}", errs.join(", "));
    }
    if !p.counts.chaos.is_empty() {
        let knobs: Vec<String> = p
            .counts
            .chaos
            .iter()
            .map(|(k, v)| {
                let share = *v as f64 / p.counts.finished.max(1) as f64;
                format!("{k} {v} ({:.0}%)", share * 100.0)
            })
            .collect();
        let _ = writeln!(s, "  chaos (on purpose): {}", knobs.join(", "));
    }
    if p.counts.reconnected > 0 {
        let _ = writeln!(
            s,
            "  resent on a fresh connection: {} (the server closed kept-alive connections unannounced; not errors)",
            p.counts.reconnected
        );
    }
    if let Some(c) = p.latency_ms.get("connect").filter(|c| c.count > 0) {
        let _ = writeln!(
            s,
            "  connect: {} requests waited for a new connection, p50 {}, p99 {}, max {} (in their TTFT and E2E)",
            c.count,
            fmt_ms(c.p50),
            fmt_ms(c.p99),
            fmt_ms(c.max)
        );
    }
}

/// The lines of tasks (pipelines, checks, conversations), per-turn TTFT and ICE, when a phase
/// has them.
fn conversation_lines(s: &mut String, p: &PhaseReport) {
    if let Some(v) = &p.pipeline {
        pipeline::lines(s, v);
    }
    if let Some(v) = &p.sessions {
        session::lines(s, v);
    }
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

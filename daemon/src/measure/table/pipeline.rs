//! The terminal lines of a pipeline phase: one per step (latency, share of E2E, fallbacks),
//! then the final chat's TTFT and the tool-call depth.

use std::fmt::Write as _;

use super::fmt_ms;
use crate::measure::pipeline::PipelineView;

/// Writes the pipeline lines of a phase.
pub fn lines(s: &mut String, v: &PipelineView) {
    let _ = writeln!(
        s,
        "  pipeline: {} tasks; step    p50       p99      p999   share  fallbacks",
        v.tasks
    );
    for st in &v.steps {
        let skipped = if st.skipped > 0 {
            format!(", {} not needed", st.skipped)
        } else {
            String::new()
        };
        let failed = if st.failed > 0 {
            format!(", {} failed the task", st.failed)
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            "    {:<8} {:>9} {:>9} {:>9} {:>6.1}%  {} ({:.1}%){skipped}{failed}",
            st.step.name(),
            fmt_ms(st.latency_ms.p50),
            fmt_ms(st.latency_ms.p99),
            fmt_ms(st.latency_ms.p999),
            st.share_of_e2e * 100.0,
            st.fallbacks,
            st.fallback_rate * 100.0,
        );
    }
    let _ = writeln!(
        s,
        "    {:<8} {:>49.1}%  (send lag and the client between steps)",
        "other",
        v.other_share_of_e2e * 100.0
    );
    if v.final_chat_ttft_ms.count > 0 {
        let t = &v.final_chat_ttft_ms;
        let _ = writeln!(
            s,
            "    final chat TTFT (from its send) p50 {}, p99 {}, p999 {}",
            fmt_ms(t.p50),
            fmt_ms(t.p99),
            fmt_ms(t.p999)
        );
    }
    if !v.tool_depth.is_empty() {
        let mut depths: Vec<(u32, u64)> = v
            .tool_depth
            .iter()
            .filter_map(|(d, n)| Some((d.parse().ok()?, *n)))
            .collect();
        depths.sort_unstable();
        let parts: Vec<String> = depths.iter().map(|(d, n)| format!("{d}: {n}")).collect();
        let _ = writeln!(s, "    tool-call depth (tasks): {}", parts.join(", "));
    }
}

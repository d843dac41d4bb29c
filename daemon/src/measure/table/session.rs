//! The terminal lines of a session phase: the sessions (how many ended how, their E2E, turns
//! and tokens), then where their time went and their calls by depth.

use std::fmt::Write as _;

use super::fmt_ms;
use crate::measure::{session::SessionsView, summary::Summary};

/// A percentile, or `too few` when it had too few samples to be a number.
fn pct(s: &Summary, q: &str, fmt: impl Fn(f64) -> String) -> String {
    match s.percentile(q).filter(|_| s.count > 0) {
        Some(_) if s.is_too_few(q) => "too few".into(),
        Some(v) => fmt(v),
        None => "-".into(),
    }
}

/// Writes the session lines of a phase.
pub fn lines(s: &mut String, v: &SessionsView) {
    let n = |x: f64| format!("{x:.0}");
    let _ = writeln!(
        s,
        "  sessions: {} completed, {} failed, {} cut; e2e p50 {} p99 {}; per session p50 {} calls, {} in / {} out tokens; {} tool calls, {} sub-agents, {} compactions",
        v.completed,
        v.failed,
        v.cut,
        pct(&v.e2e_ms, "p50", fmt_ms),
        pct(&v.e2e_ms, "p99", fmt_ms),
        pct(&v.turns, "p50", n),
        pct(&v.input_tokens, "p50", n),
        pct(&v.output_tokens, "p50", n),
        v.tool_calls,
        v.subagents,
        v.compactions,
    );
    let depths: Vec<String> = v
        .depth
        .iter()
        .map(|(d, x)| {
            format!(
                "depth {d} {} calls ttft p50 {} context p50 {} max {:.0}",
                x.calls,
                pct(&x.ttft_ms, "p50", fmt_ms),
                pct(&x.context_tokens, "p50", n),
                x.context_tokens.max
            )
        })
        .collect();
    // Shares are of completed sessions' time: none completed, none to give.
    let time = if v.completed == 0 {
        "no session completed (make the phase longer than a session)".to_owned()
    } else {
        format!(
            "model {:.1}%, tools {:.1}%, think {:.1}%, client {:.1}%",
            v.model.share_of_e2e * 100.0,
            v.tools.share_of_e2e * 100.0,
            v.think.share_of_e2e * 100.0,
            v.client.share_of_e2e * 100.0,
        )
    };
    let _ = writeln!(s, "    time: {time}; {}", depths.join("; "));
}

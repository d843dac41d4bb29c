//! The rows and lines the benchmark prints: open-file limits, each run's accuracy and cost,
//! the ramped run against the server's own TTFT.

use super::measures::{
    BASE_STREAMS, ITL_TARGET_MS, Measured, RAMPED_P99_TARGET, SATURATED, TTFT_TARGET_MS,
};
use crate::bench::procs;

/// The open-file limits the runs get, and whether `most` streams fit.
pub(super) fn fd_note(most: usize) {
    if let Some((soft, hard)) = procs::fd_limits() {
        // `inferscope` raises its soft limit to the hard one; each stream is one descriptor
        // in the client and one in the sim.
        println!(
            "  open files: soft {soft}, hard {hard} ({}); inferscope raises its soft limit to the hard one",
            if hard > most as u64 + 256 {
                format!("enough for {most} streams")
            } else {
                format!(
                    "too few for {most} streams: raise `ulimit -Hn`; expect client_fd_limit errors"
                )
            }
        );
    }
}

/// The ramped 1,000-stream run's TTFT p99 against the server's own, and the run without one.
pub(super) fn ramped_line(ramped: Option<(f64, f64)>, unramped_p99: Option<f64>) {
    let Some((client, server)) = ramped else {
        return;
    };
    let ratio = client / server;
    println!(
        "  ramped 1000 streams: TTFT p99 {client:.1} ms, the server's own {server:.1} ms: {ratio:.2}x \
         (target <= {RAMPED_P99_TARGET}x: {}){}",
        if ratio <= RAMPED_P99_TARGET {
            "met"
        } else {
            "NOT met"
        },
        unramped_p99.map_or(String::new(), |u| format!(
            "; without a ramp {u:.1} ms ({:.1}x)",
            u / server
        ))
    );
}

pub(super) fn row(tool: &str, m: &Measured) -> Vec<String> {
    let mark = |err: f64, target: f64| if err.abs() <= target { "" } else { " (over)" };
    let (c, t) = (&m.client, &m.truth);
    let (te, ie) = (c.ttft_p50 - t.ttft_p50, c.itl_p99 - t.itl_p99);
    vec![
        tool.to_string(),
        format!("{:.0} ({:.0})", c.requests, c.failed),
        c.ramp
            .map_or("-".into(), |(s, n)| format!("{s:.1} ({n:.0})")),
        format!("{:.1} / {:.1}", c.ttft_p50, t.ttft_p50),
        format!("{te:+.1} ms{}", mark(te, TTFT_TARGET_MS)),
        format!("{:.1} / {:.1}", c.itl_p99, t.itl_p99),
        format!("{ie:+.1} ms{}", mark(ie, ITL_TARGET_MS)),
        format!(
            "{:.2} / {:.2} / {:.2}",
            t.late_ttft_p50, t.late_ttft_p99, t.late_itl_p99
        ),
    ]
}

pub(super) fn cost_row(streams: usize, m: &Measured, base_rss: f64) -> Vec<String> {
    let u = m.client.usage.unwrap_or_default();
    let wall = u.wall_s.max(1e-9);
    let (client, server) = (u.cpu_s / wall, m.server_cpu_s / wall);
    let out = match (client > SATURATED, server > SATURATED) {
        (true, true) => "both",
        (true, false) => "client",
        (false, true) => "server",
        (false, false) => "neither",
    };
    let per_stream = (u.peak_rss_mib - base_rss) * 1024.0 / (streams - BASE_STREAMS) as f64;
    vec![
        streams.to_string(),
        format!("{:.1}", u.peak_rss_mib),
        format!("{per_stream:.1}"),
        format!("{:.1} ({:.0}%)", u.cpu_s, client * 100.0),
        format!("{:.1} ({:.0}%)", m.server_cpu_s, server * 100.0),
        out.into(),
        m.client
            .send_lag_p99
            .map_or("-".into(), |v| format!("{v:.2}")),
        m.client
            .connect
            .map_or("-".into(), |(p50, p99)| format!("{p50:.2} / {p99:.2}")),
    ]
}

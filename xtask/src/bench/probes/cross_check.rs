//! Cross-check: run-queue p50/p99 of inferscope against bpftrace on the same workload runs.

use std::{process::Stdio, time::Duration};

use super::parse::{inferscope_buckets, log2_quantile, parse_bpftrace_hist, summary_field};
use super::tracers::{BPFTRACE_RUNQLAT, SECS, inferscope, start_bpftrace, workload_on};
use crate::bench::{procs, table};

/// Run-queue p50/p99 of every process during one workload run, from bpftrace's runqlat and
/// from `inferscope runqlat` in both kernel variants, all attached at once.
pub(super) fn cross_check() -> anyhow::Result<()> {
    println!(
        "\n== cross-check: run-queue latency of all processes, inferscope vs bpftrace, same runs"
    );
    let cpu = procs::cpus().1;
    let mut rows = Vec::new();
    for (label, pin, kind) in [
        ("pipe, pinned", Some(cpu), "pipe"),
        ("tcp, pinned", Some(cpu), "tcp"),
        ("pipe, unpinned", None, "pipe"),
    ] {
        let script = format!(
            "{BPFTRACE_RUNQLAT}\ninterval:s:{} {{ exit(); }}",
            SECS as u64 + 1
        );
        let bt = start_bpftrace(&script)?;
        let runqlat = |variant: &str| {
            inferscope()
                .args(["runqlat", "--variant", variant, "--interval"])
                .arg(format!("{}s", SECS as u64 + 1))
                .args(["--count", "1", "--top", "0"])
                .stdout(Stdio::piped())
                .spawn()
        };
        let (raw, classic) = (runqlat("raw")?, runqlat("classic")?);
        std::thread::sleep(Duration::from_millis(500));
        workload_on(pin, kind, SECS)?;
        let theirs = bt.wait_with_output()?;
        let hist = inferscope_buckets(parse_bpftrace_hist(&String::from_utf8_lossy(
            &theirs.stdout,
        )));
        let bpftrace = [log2_quantile(&hist, 0.5), log2_quantile(&hist, 0.99)];
        let mut row = vec![
            label.to_string(),
            format!("{:.1} / {:.1}", bpftrace[0], bpftrace[1]),
        ];
        for child in [raw, classic] {
            let text = String::from_utf8_lossy(&child.wait_with_output()?.stdout).to_string();
            let q = ["p50", "p99"].map(|k| summary_field(&text, k).unwrap_or(f64::NAN));
            let diff = |i: usize| 100.0 * (q[i] - bpftrace[i]) / bpftrace[i];
            row.push(format!(
                "{:.1} / {:.1} ({:+.0}% / {:+.0}%)",
                q[0],
                q[1],
                diff(0),
                diff(1)
            ));
        }
        rows.push(row);
    }
    table(
        &[
            "workload",
            "bpftrace p50 / p99 us",
            "inferscope raw (the daemon's)",
            "inferscope classic (runqlat's)",
        ],
        &rows,
    );
    println!(
        "  target: within 20% on the overhead workloads (pinned). Quantiles of both tools are read\n  \
         from the same log2 buckets. `inferscope runqlat` stamps wakeups as bcc does (classic);\n  \
         the daemon's raw variant reads the scheduler's own run_delay accounting, which does not\n  \
         re-read the clock between a wakeup that preempts (or kicks an idle CPU) and the switch:\n  \
         those microseconds are not counted."
    );
    Ok(())
}

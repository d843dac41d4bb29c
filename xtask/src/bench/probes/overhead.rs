//! What the kernel probes cost a scheduler-heavy workload: throughput bare, with the daemon
//! and with bpftrace, rounds interleaved; and each eBPF program's runs from `bpf_stats`.

use super::tracers::{
    BPFTRACE_RUNQLAT, start_bpftrace, start_daemon, stop, tracer_cpu, workload_on,
};
use crate::bench::{procs, table};

const ROUNDS: usize = 30;
const ROUND_SECS: f64 = 1.0;
/// bpftrace runs in every this many rounds (it is there for comparison only).
const BPFTRACE_EVERY: usize = 3;

/// `100 * runs[i] / bare around it`, sorted: each run against the mean of the bare runs right
/// before and after it (`base` has one more entry than rounds), which cancels the machine's
/// drift over the seconds between them.
fn ratios(runs: &[(usize, f64)], base: &[f64]) -> Vec<f64> {
    let mut r: Vec<f64> = runs
        .iter()
        .map(|&(i, v)| 200.0 * v / (base[i] + base[i + 1]))
        .collect();
    r.sort_by(f64::total_cmp);
    r
}

/// `median% (95% CI lo-hi%)` of sorted ratios: the confidence interval of a median from the
/// order statistics (binomial, normal approximation), no assumption about the noise's shape.
fn median_ci(r: &[f64]) -> String {
    let n = r.len() as f64;
    let half = 1.96 * n.sqrt() / 2.0;
    let lo = ((n / 2.0 - half).floor() as usize).min(r.len() - 1);
    let hi = ((n / 2.0 + half).ceil() as usize).min(r.len() - 1);
    format!("{:.1}% (95% CI {:.1}-{:.1}%)", r[r.len() / 2], r[lo], r[hi])
}

pub(super) fn overhead() -> anyhow::Result<()> {
    let cpu = procs::cpus().1;
    println!(
        "\n== probe overhead: throughput of scheduler-heavy workloads pinned to CPU {cpu}, tracers \
         on CPU {} ({ROUND_SECS} s per run, {ROUNDS} rounds interleaved, each run against the \
         bare runs around it, median of those ratios; load average {})",
        tracer_cpu(),
        procs::load_average()
    );
    let mut rows = Vec::new();
    let mut costs = Vec::new();
    let mut estimates = Vec::new();
    for kind in ["pipe", "tcp"] {
        let (mut base, mut daemon, mut bpft) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..ROUNDS {
            base.push(workload_on(Some(cpu), kind, ROUND_SECS)?);
            let d = start_daemon()?;
            daemon.push((i, workload_on(Some(cpu), kind, ROUND_SECS)?));
            stop(d)?;
            if i % BPFTRACE_EVERY == 0 {
                let b = start_bpftrace(BPFTRACE_RUNQLAT)?;
                bpft.push((i, workload_on(Some(cpu), kind, ROUND_SECS)?));
                stop(b)?;
            }
        }
        base.push(workload_on(Some(cpu), kind, ROUND_SECS)?);
        // One more daemon run, not counted, with the kernel's per-program stats on (they add
        // a clock read or two to every run).
        let d = start_daemon()?;
        let stats = BpfStats::on(true);
        let ops = workload_on(Some(cpu), kind, ROUND_SECS)? * ROUND_SECS;
        let progs = program_costs(d.id());
        drop(stats);
        stop(d)?;
        let per_op: f64 = progs.iter().map(|p| p.ns / ops).sum();
        let bare_op = 1e9 / procs::mean(&base);
        estimates.push(format!(
            "  {kind}: the daemon's programs ran {per_op:.0} ns per op (bpf_stats), a bare op takes \
             {bare_op:.0} ns: {:.1}% of bare if that were all",
            100.0 * bare_op / (bare_op + per_op)
        ));
        costs.extend(progs.iter().map(|p| {
            vec![
                kind.to_string(),
                p.what.clone(),
                format!("{:.0}", p.runs),
                format!("{:.0}", p.ns / p.runs),
            ]
        }));
        let share = |v: &[(usize, f64)]| {
            let r = ratios(v, &base);
            format!(
                "{:.0}: {}, runs {}%",
                procs::mean(&v.iter().map(|x| x.1).collect::<Vec<_>>()),
                median_ci(&r),
                procs::spread(&r, 0)
            )
        };
        rows.push(vec![
            kind.to_string(),
            format!("{:.0}", procs::mean(&base)),
            share(&daemon),
            share(&bpft),
        ]);
    }
    table(
        &[
            "workload",
            "bare ops/s",
            "inferscope daemon: ops/s: % of bare",
            "bpftrace runqlat: ops/s: % of bare",
        ],
        &rows,
    );
    println!("  target: inferscope daemon >= 97% of bare");
    if !costs.is_empty() {
        table(
            &["workload", "daemon program", "runs", "ns per run"],
            &costs,
        );
        println!(
            "  (an extra daemon run with kernel.bpf_stats_enabled; the stats add ~10-20 ns per run)"
        );
        println!("{}", estimates.join("\n"));
    }
    Ok(())
}

/// `kernel.bpf_stats_enabled` on for one measurement, restored afterwards.
struct BpfStats(String);

impl BpfStats {
    const KNOB: &str = "/proc/sys/kernel/bpf_stats_enabled";

    fn on(wanted: bool) -> Option<Self> {
        let before = std::fs::read_to_string(Self::KNOB).ok()?;
        (wanted && std::fs::write(Self::KNOB, "1").is_ok()).then(|| Self(before))
    }
}

/// One eBPF program's share of a run, from `kernel.bpf_stats_enabled`.
struct ProgramCost {
    what: String,
    runs: f64,
    ns: f64,
}

/// Runs and total run time of every eBPF program `pid` holds that ran (`fdinfo` of its fds).
fn program_costs(pid: u32) -> Vec<ProgramCost> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return Vec::new();
    };
    let mut rows = Vec::new();
    for fd in fds.flatten() {
        let Ok(info) = std::fs::read_to_string(fd.path()) else {
            continue;
        };
        let field = |k: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(k)?.trim().parse::<f64>().ok())
        };
        let (Some(ty), Some(ns), Some(n)) = (
            field("prog_type:"),
            field("run_time_ns:"),
            field("run_cnt:"),
        ) else {
            continue;
        };
        if n > 0.0 {
            let what = match ty as u32 {
                17 => "raw tracepoint",
                5 => "tracepoint",
                _ => "other",
            };
            let id = field("prog_id:").unwrap_or(0.0);
            rows.push(ProgramCost {
                what: format!("{what} (prog id {id:.0})"),
                runs: n,
                ns,
            });
        }
    }
    rows
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        let _ = std::fs::write(Self::KNOB, self.0.trim());
    }
}

//! `inferscope runqlat`: per-process run-queue latency histograms, like bcc's runqlat.

use std::{collections::BTreeMap, process::ExitCode, time::Duration};

use anyhow::Context as _;
use inferscope::{
    collect::{procfs, runq::RunqHist},
    probes::{Probes, runqlat::Variant},
};

/// Arguments of `inferscope runqlat`.
#[derive(clap::Args)]
pub struct Args {
    /// Only these processes (tgid); repeat for more. Default: every process.
    #[arg(long = "pid", value_name = "PID")]
    pids: Vec<u32>,
    /// Length of one interval.
    #[arg(long, default_value = "1s", value_parser = super::args::positive_duration)]
    interval: Duration,
    /// Number of intervals to print, then exit; 0 = until Ctrl-C.
    #[arg(long, default_value_t = 0)]
    count: u64,
    /// Print histograms of at most this many processes per interval (most samples first).
    #[arg(long, default_value_t = 5)]
    top: usize,
    /// Kernel programs. `classic`: wakeup stamps on three tracepoints, bcc's numbers (and
    /// about bcc's cost while it runs). `raw`: the scheduler's own accounting from one raw
    /// tracepoint, the daemon's choice, a fraction of the cost; it does not count the
    /// microseconds between a wakeup that preempts and the switch.
    #[arg(long, value_enum, default_value_t = Variant::Classic)]
    variant: Variant,
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let mut probe = Probes::load()?;
    probe.set_watch(&args.pids)?;
    probe.attach_runqlat(args.variant)?;
    println!("Tracing run queue latency... Hit Ctrl-C to end.");
    let mut last: BTreeMap<u32, RunqHist> = BTreeMap::new();
    let mut n = 0;
    while args.count == 0 || n < args.count {
        std::thread::sleep(args.interval);
        n += 1;
        let now: BTreeMap<u32, RunqHist> = probe
            .runq_snapshot()?
            .into_iter()
            .map(|(t, h)| (t, RunqHist(h)))
            .collect();
        let mut deltas: Vec<(u32, RunqHist)> = now
            .iter()
            .map(|(t, h)| (*t, h.since(&last.get(t).copied().unwrap_or_default())))
            .filter(|(_, d)| d.count() > 0)
            .collect();
        deltas.sort_by_key(|(t, d)| (std::cmp::Reverse(d.count()), *t));
        let mut total = RunqHist::default();
        for (tgid, d) in &deltas {
            total.merge(d);
            if args.pids.contains(tgid)
                || deltas.iter().position(|(t, _)| t == tgid) < Some(args.top)
            {
                print_hist(*tgid, d);
            }
        }
        println!(
            "[{n}] {} processes, {} samples: p50 {} us, p99 {} us, mean {:.1} us",
            deltas.len(),
            total.count(),
            fmt_q(total.quantile_us(0.5)),
            fmt_q(total.quantile_us(0.99)),
            total.mean_us(),
        );
        let drops = probe.runq_drops().context("reading drop counters")?;
        if drops.start_full + drops.hist_full > 0 {
            println!(
                "  not recorded (maps full): {} wakeups, {} samples",
                drops.start_full, drops.hist_full
            );
        }
        last = now;
        probe.runq_prune(procfs::alive)?;
        last.retain(|t, _| procfs::alive(*t));
    }
    Ok(ExitCode::SUCCESS)
}

fn fmt_q(q: Option<f64>) -> String {
    q.map_or_else(|| "-".to_string(), |v| format!("{v:.1}"))
}

/// Prints one histogram in bcc's layout.
fn print_hist(tgid: u32, h: &RunqHist) {
    println!(
        "\ntgid = {tgid} comm = {}  (p50 {} us, p99 {} us)",
        procfs::comm(tgid),
        fmt_q(h.quantile_us(0.5)),
        fmt_q(h.quantile_us(0.99))
    );
    println!("{:>20} : {:<8} distribution", "usecs", "count");
    let rows = h.rows();
    let max = rows.iter().map(|r| r.2).max().unwrap_or(1).max(1);
    for (lo, hi, n) in rows {
        let width = (n * 40).div_ceil(max) as usize;
        let width = if n == 0 { 0 } else { width.max(1) };
        println!(
            "{:>10} -> {:<8}: {:<8} |{:<40}|",
            lo,
            hi,
            n,
            "*".repeat(width)
        );
    }
}

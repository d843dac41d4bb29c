//! `cargo xtask bench probes`: what the kernel probes cost and whether they agree with bpftrace.
//!
//! 1. Throughput of scheduler-heavy workloads (pipe ping-pong between two processes, loopback
//!    TCP request/response) bare, with `inferscope daemon` attached, and with `bpftrace`
//!    running an equivalent runqlat script; rounds interleaved, ratios printed.
//! 2. The daemon's own CPU and RSS at idle, and with verdicts on every window of a served sim
//!    under load: CPU per second, and RSS once its time line is full (3600 windows).
//! 3. Loss counters under the heaviest workload, and the scheduler event rate it produced.
//! 4. Cross-check: run-queue p50/p99 of inferscope vs bpftrace on the same workload.
use std::{
    io::{Read as _, Write as _},
    net::TcpStream,
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{Context as _, bail};

use super::{procs, table};
use crate::run;

const DAEMON_ADDR: &str = "127.0.0.1:19465";
const SECS: f64 = 4.0;

/// bpftrace's runqlat on the same tracepoints and with the same re-queue rule. Like bcc's
/// runqlat (and inferscope), the idle task is not a task waiting for a CPU: pid 0 is skipped,
/// else its "wait" (the time its CPU was busy) fills the 0.5-1 ms buckets.
const BPFTRACE_RUNQLAT: &str = r"
tracepoint:sched:sched_wakeup, tracepoint:sched:sched_wakeup_new { @q[args->pid] = nsecs; }
tracepoint:sched:sched_switch {
  if ((args->prev_state & 0xff) == 0 && args->prev_pid != 0) { @q[args->prev_pid] = nsecs; }
  $ns = @q[args->next_pid];
  if ($ns) { @usecs = hist((nsecs - $ns) / 1000); delete(@q[args->next_pid]); }
}
";

pub fn run() -> anyhow::Result<()> {
    if !run::is_root() {
        bail!(
            "the probe benchmark attaches eBPF programs: run it as root (sudo cargo xtask bench probes)"
        );
    }
    super::procs::build_release()?;
    overhead()?;
    idle_cost()?;
    loaded_cost()?;
    cross_check()?;
    Ok(())
}

/// `inferscope` on [`tracer_cpu`].
fn inferscope() -> Command {
    procs::pinned(tracer_cpu(), procs::inferscope_bin())
}

/// Runs workload `kind` for `secs`; on one CPU when `cpu` is given (both ends of the ping-pong
/// then take turns on it: every round trip is two context switches, and the run-to-run spread
/// of an unpinned run, which depends on where the scheduler places the two ends, is gone).
fn workload_on(cpu: Option<usize>, kind: &str, secs: f64) -> anyhow::Result<f64> {
    let exe = std::env::current_exe()?;
    let mut cmd = match cpu {
        Some(c) => procs::pinned(c, exe),
        None => Command::new(exe),
    };
    let out = run::stdout(cmd.args(["workload", kind, &secs.to_string()]))?;
    out.strip_prefix("ops ")
        .and_then(|v| v.trim().parse().ok())
        .with_context(|| format!("workload printed `{out}`"))
}

fn workload(kind: &str, secs: f64) -> anyhow::Result<f64> {
    workload_on(None, kind, secs)
}

/// The CPU the tracers' own processes run on, away from the pinned workload: the overhead
/// table measures what the kernel hooks cost the workload (the daemon's own CPU is measured
/// apart, at idle).
fn tracer_cpu() -> usize {
    procs::cpus().0
}

/// Starts the daemon watching pid 1 (every hook attached, programs run on every event).
fn start_daemon() -> anyhow::Result<Child> {
    start_daemon_with(&["--pid", "1"])
}

/// Starts the daemon with `args` (what to watch, the window); its logs are dropped.
fn start_daemon_with(args: &[&str]) -> anyhow::Result<Child> {
    let child = inferscope()
        .args([
            "daemon",
            "--listen",
            DAEMON_ADDR,
            "--api-listen",
            "127.0.0.1:0",
        ])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting inferscope daemon")?;
    wait_for(|| http_get(DAEMON_ADDR, "/api/v1/timeline").is_ok())?;
    // Its first discovery pass and window run right after start: let them pass.
    std::thread::sleep(Duration::from_secs(1));
    Ok(child)
}

fn start_bpftrace(script: &str) -> anyhow::Result<Child> {
    let mut child = procs::pinned(tracer_cpu(), "bpftrace")
        .args(["-e", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting bpftrace (cargo xtask setup installs it)")?;
    // bpftrace prints "Attaching N probes..." once it is attached.
    let mut buf = [0u8; 1];
    let out = child.stdout.as_mut().expect("piped");
    while out.read(&mut buf)? == 1 && buf[0] != b'\n' {}
    Ok(child)
}

/// SIGINT (bpftrace prints its maps; the daemon exits cleanly), resent every second: bpftrace
/// misses one that arrives while it is still attaching. SIGKILL after 20 s.
fn stop(mut child: Child) -> anyhow::Result<String> {
    let out = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut s) = out {
            let _ = s.read_to_string(&mut text);
        }
        text
    });
    for _ in 0..20 {
        unsafe_kill(child.id(), 2);
        for _ in 0..10 {
            if child.try_wait()?.is_some() {
                return Ok(reader.join().unwrap_or_default());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    child.kill()?;
    child.wait()?;
    Ok(reader.join().unwrap_or_default())
}

fn unsafe_kill(pid: u32, sig: i32) {
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status();
}

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

fn overhead() -> anyhow::Result<()> {
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

fn idle_cost() -> anyhow::Result<()> {
    println!("\n== daemon cost at idle and losses under load");
    let d = start_daemon()?;
    std::thread::sleep(Duration::from_secs(1));
    let t0 = procs::cpu_seconds(d.id())?;
    std::thread::sleep(Duration::from_secs(10));
    // Share of one core over the 10 s, in percent.
    let cpu = (procs::cpu_seconds(d.id())? - t0) / 10.0 * 100.0;
    let rss_mib = procs::rss_mib(d.id())?;
    // The heaviest workload, twice in parallel, while the daemon counts what it loses.
    let rate = event_rate_under(|| {
        let a = std::thread::spawn(|| workload("pipe", SECS));
        let b = workload("pipe", SECS);
        let _ = a.join();
        b.map(|_| ())
    })?;
    let snap = http_get(DAEMON_ADDR, "/api/v1/timeline")?;
    let losses = snap
        .split("\"losses\":")
        .nth(1)
        .and_then(|s| s.split('}').next())
        .unwrap_or("?")
        .to_string();
    stop(d)?;
    table(
        &["measure", "value", "target"],
        &[
            vec![
                "daemon CPU at idle".into(),
                format!("{cpu:.2}% of a core"),
                "< 1%".into(),
            ],
            vec![
                "daemon RSS".into(),
                format!("{rss_mib:.1} MiB"),
                "< 64 MiB".into(),
            ],
            vec![
                "sched events/s during the loss check".into(),
                format!("{rate:.0}"),
                ">= 200000".into(),
            ],
            vec![
                "losses (kernel + channels)".into(),
                format!("{losses}}}"),
                "all 0".into(),
            ],
        ],
    );
    Ok(())
}

/// The daemon beside the sim (`--port`: probes on the server's sockets and threads, its metrics
/// scraped, a verdict for every window) while `inferscope stress` loads the sim at 16 req/s.
/// Twice: 1 s windows for the CPU it takes per second of load, then 10 ms windows for 38 s, so
/// the time line fills its 3600 windows (an hour at 1 s), for the RSS it keeps.
fn loaded_cost() -> anyhow::Result<()> {
    let (server_cpu, client_cpu) = procs::cpus();
    println!(
        "\n== daemon cost with verdicts on, beside the sim under load (16 req/s from inferscope \
         stress on CPU {client_cpu}; sim on CPU {server_cpu})"
    );
    let addr = format!("127.0.0.1:{}", procs::free_port()?);
    let mut sim = procs::pinned(server_cpu, procs::inferscope_bin());
    sim.args(["sim", "--profile", "healthy", "--corpus-size", "100"])
        .args(["--listen", &addr]);
    let sim = procs::Server::start(sim, addr, "inferscope sim")?;
    let port = sim.addr.rsplit(':').next().unwrap_or_default().to_string();
    let load = |secs: u64| stress_on(client_cpu, &sim.addr, secs);
    let finish = |mut c: Child| -> anyhow::Result<()> {
        let st = c.wait()?;
        anyhow::ensure!(st.success(), "inferscope stress failed ({st})");
        Ok(())
    };

    let d = start_daemon_with(&["--port", &port])?;
    let stress = load(14)?;
    std::thread::sleep(Duration::from_secs(2));
    let t0 = procs::cpu_seconds(d.id())?;
    std::thread::sleep(Duration::from_secs(10));
    let cpu = (procs::cpu_seconds(d.id())? - t0) / 10.0 * 100.0;
    finish(stress)?;
    let verdicts = http_get(DAEMON_ADDR, "/api/v1/verdicts")?
        .matches("\"cause\"")
        .count();
    stop(d)?;

    let d = start_daemon_with(&["--port", &port, "--interval", "10ms"])?;
    let stress = load(40)?;
    std::thread::sleep(Duration::from_secs(38));
    let rss = procs::rss_mib(d.id())?;
    let timeline = http_get(DAEMON_ADDR, "/api/v1/timeline")?;
    let windows = timeline
        .split_once("\r\n\r\n")
        .and_then(|(_, body)| serde_json::from_str::<serde_json::Value>(body).ok())
        .and_then(|t| {
            let closed = t.get("windows_closed")?.as_u64()?;
            let kept = t.pointer("/servers/0/windows")?.as_u64()?;
            Some(format!("{kept} of {closed} windows kept"))
        });
    finish(stress)?;
    stop(d)?;

    let (cpu3, rss3, servers) = three_servers(sim, server_cpu, client_cpu)?;
    table(
        &["measure", "value", "target"],
        &[
            vec![
                "daemon CPU, 1 s windows, under load".into(),
                format!("{cpu:.2}% of a core ({verdicts} verdicts served)"),
                "< 2%".into(),
            ],
            vec![
                "daemon RSS, time line full (10 ms windows, 38 s)".into(),
                format!(
                    "{rss:.1} MiB ({})",
                    windows.unwrap_or_else(|| "time line unreadable".into())
                ),
                "< 64 MiB".into(),
            ],
            vec![
                format!("three servers ({servers} time lines), 1 s windows, under load"),
                format!("{cpu3:.2}% of a core, {rss3:.1} MiB (one server: {cpu:.2}%)"),
                "< 2%, < 96 MiB".into(),
            ],
        ],
    );
    Ok(())
}

/// `inferscope stress` at 16 req/s for `secs` against the sim at `addr`, on `cpu`.
fn stress_on(cpu: usize, addr: &str, secs: u64) -> anyhow::Result<Child> {
    procs::pinned(cpu, procs::inferscope_bin())
        .args(["stress", "--target", &format!("http://{addr}")])
        .args([
            "--model",
            "inferscope-sim",
            "--max-tokens",
            "64",
            "--rate",
            "16",
        ])
        .args(["--duration", &format!("{secs}s"), "-q", "--no-records"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting inferscope stress")
}

/// The daemon's CPU (% of a core) and RSS (MiB) with three servers on the node, each under
/// load and each its own time line and verdict (`sim` and two more), and how many servers its
/// time line lists.
fn three_servers(
    sim: procs::Server,
    server_cpu: usize,
    client_cpu: usize,
) -> anyhow::Result<(f64, f64, usize)> {
    let finish = |mut c: Child| -> anyhow::Result<()> {
        let st = c.wait()?;
        anyhow::ensure!(st.success(), "inferscope stress failed ({st})");
        Ok(())
    };
    let mut sims = vec![sim];
    for _ in 0..2 {
        let addr = format!("127.0.0.1:{}", procs::free_port()?);
        let mut more = procs::pinned(server_cpu, procs::inferscope_bin());
        more.args(["sim", "--profile", "healthy", "--corpus-size", "100"])
            .args(["--listen", &addr]);
        sims.push(procs::Server::start(more, addr, "inferscope sim")?);
    }
    let ports: Vec<String> = sims
        .iter()
        .map(|s| s.addr.rsplit(':').next().unwrap_or_default().to_string())
        .collect();
    let port_args: Vec<&str> = ports.iter().flat_map(|p| ["--port", p.as_str()]).collect();
    let d = start_daemon_with(&port_args)?;
    let loads = sims
        .iter()
        .map(|s| stress_on(client_cpu, &s.addr, 14))
        .collect::<anyhow::Result<Vec<_>>>()?;
    std::thread::sleep(Duration::from_secs(2));
    let t0 = procs::cpu_seconds(d.id())?;
    std::thread::sleep(Duration::from_secs(10));
    let cpu3 = (procs::cpu_seconds(d.id())? - t0) / 10.0 * 100.0;
    let rss3 = procs::rss_mib(d.id())?;
    for l in loads {
        finish(l)?;
    }
    let timeline = http_get(DAEMON_ADDR, "/api/v1/timeline")?;
    let servers = timeline
        .split_once("\r\n\r\n")
        .and_then(|(_, body)| serde_json::from_str::<serde_json::Value>(body).ok())
        .and_then(|t| Some(t.get("servers")?.as_array()?.len()))
        .context("the daemon's time line lists no servers")?;
    stop(d)?;
    Ok((cpu3, rss3, servers))
}

/// Runs `load` under `inferscope runqlat` (all processes) and returns the scheduler events per
/// second it saw: every sample is one enqueue (wakeup or re-queue) plus one switch-in.
fn event_rate_under(load: impl FnOnce() -> anyhow::Result<()>) -> anyhow::Result<f64> {
    let rq = inferscope()
        .args([
            "runqlat",
            "--variant",
            "raw",
            "--interval",
            &format!("{SECS}s"),
            "--count",
            "1",
            "--top",
            "0",
        ])
        .stdout(Stdio::piped())
        .spawn()?;
    std::thread::sleep(Duration::from_millis(300));
    load()?;
    let out = rq.wait_with_output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let samples: f64 = summary_field(&text, "samples").context("runqlat printed no summary")?;
    Ok(samples * 2.0 / SECS)
}

/// `[1] N processes, M samples: p50 X us, p99 Y us, ...` -> the number before/after `key`.
fn summary_field(text: &str, key: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.starts_with("[1]"))?;
    let words: Vec<&str> = line
        .split([' ', ',', ':'])
        .filter(|w| !w.is_empty())
        .collect();
    let i = words.iter().position(|w| *w == key)?;
    if key == "samples" {
        words.get(i - 1)?.parse().ok()
    } else {
        words.get(i + 1)?.parse().ok()
    }
}

/// Run-queue p50/p99 of every process during one workload run, from bpftrace's runqlat and
/// from `inferscope runqlat` in both kernel variants, all attached at once.
fn cross_check() -> anyhow::Result<()> {
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

/// bpftrace hist lines `[lo, hi)  count |@@@|` (and `[0]`, `[1]`) -> (lo, hi, count).
fn parse_bpftrace_hist(text: &str) -> Vec<(f64, f64, f64)> {
    let unit = |s: &str| -> Option<f64> {
        let s = s.trim();
        let (num, mul) = match s.chars().last()? {
            'K' => (&s[..s.len() - 1], 1024.0),
            'M' => (&s[..s.len() - 1], 1024.0 * 1024.0),
            _ => (s, 1.0),
        };
        Some(num.parse::<f64>().ok()? * mul)
    };
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            let (range, rest) = l
                .strip_prefix('[')?
                .split_once(']')
                .or_else(|| l.strip_prefix('[')?.split_once(')'))?;
            let count: f64 = rest.split_whitespace().next()?.parse().ok()?;
            if let Some((lo, hi)) = range.split_once(',') {
                Some((unit(lo)?, unit(hi)?, count))
            } else {
                let v = unit(range)?;
                Some((v, v + 1.0, count))
            }
        })
        .collect()
}

/// bpftrace's buckets in inferscope's layout: its `[0]` and `[1]` are inferscope's first bucket,
/// `[0, 2)` us; the rest are the same log2 buckets. Quantiles of the two tools are then read
/// from the same buckets the same way: at 1-2 us a bucket is 100% wide, and two layouts alone
/// put p50s 70% apart.
fn inferscope_buckets(h: Vec<(f64, f64, f64)>) -> Vec<(f64, f64, f64)> {
    let low: f64 = h.iter().filter(|b| b.1 <= 2.0).map(|b| b.2).sum();
    std::iter::once((0.0, 2.0, low))
        .chain(h.into_iter().filter(|b| b.1 > 2.0))
        .collect()
}

/// Quantile of a bucketed histogram, interpolated linearly inside the bucket (as inferscope does).
fn log2_quantile(h: &[(f64, f64, f64)], q: f64) -> f64 {
    let total: f64 = h.iter().map(|b| b.2).sum();
    let rank = (q * total).max(1.0);
    let mut seen = 0.0;
    for &(lo, hi, n) in h {
        if n > 0.0 && seen + n >= rank {
            return lo + (hi - lo) * ((rank - seen) / n);
        }
        seen += n;
    }
    f64::NAN
}

fn http_get(addr: &str, path: &str) -> anyhow::Result<String> {
    let mut s = TcpStream::connect(addr)?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

fn wait_for(ready: impl Fn() -> bool) -> anyhow::Result<()> {
    for _ in 0..100 {
        if ready() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!("timed out waiting for the daemon to serve {DAEMON_ADDR}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_bpftrace_histograms() {
        let text = "@usecs:\n[0]                    3 |@@@|\n[1]                    1 |@|\n[2, 4)                 4 |@@@@|\n[4, 8)                 2 |@@|\n[1K, 2K)               1 |@|\n";
        let h = parse_bpftrace_hist(text);
        assert_eq!(h.len(), 5);
        assert_eq!(h[2], (2.0, 4.0, 4.0));
        assert_eq!(h[4], (1024.0, 2048.0, 1.0));
        let p50 = log2_quantile(&h, 0.5);
        assert!((2.0..4.0).contains(&p50), "{p50}");
        let merged = inferscope_buckets(h);
        assert_eq!(merged[0], (0.0, 2.0, 4.0));
        assert_eq!(merged[1], (2.0, 4.0, 4.0));
        assert_eq!(merged.len(), 4);
    }

    #[test]
    fn reads_runqlat_summary() {
        let t =
            "Tracing...\n[1] 12 processes, 4521 samples: p50 3.2 us, p99 120.4 us, mean 9.1 us\n";
        assert_eq!(summary_field(t, "samples"), Some(4521.0));
        assert_eq!(summary_field(t, "p99"), Some(120.4));
    }
}

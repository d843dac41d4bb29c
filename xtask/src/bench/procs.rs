//! What the `sim` and `loadgen` benchmarks share: one release build, servers pinned to a CPU
//! that stop when dropped, `inferscope stress` runs read back from their JSON report.
use std::{
    net::{TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use crate::run;

/// Builds the `inferscope` binary and the `hello_http` example in release, in one cargo call
/// (building them apart would flip dependency features and rebuild the daemon each time).
/// `XTASK_BENCH_NO_BUILD=1` uses the release binaries already there (a busy machine).
pub fn build_release() -> anyhow::Result<()> {
    if std::env::var_os("XTASK_BENCH_NO_BUILD").is_some_and(|v| v == "1") {
        anyhow::ensure!(
            inferscope_bin().exists() && hello_http_bin().exists(),
            "XTASK_BENCH_NO_BUILD=1 but target/release has no inferscope or examples/hello_http"
        );
        println!("bench: XTASK_BENCH_NO_BUILD=1: using the release binaries in target/release");
        return Ok(());
    }
    println!("bench: building inferscope and examples/hello_http in release (minutes when cold)");
    run::status(&mut run::cargo(&[
        "build",
        "--release",
        "--package",
        "inferscope",
        "--bins",
        "--example",
        "hello_http",
    ]))
}

pub fn inferscope_bin() -> PathBuf {
    run::root().join("target/release/inferscope")
}

pub fn hello_http_bin() -> PathBuf {
    run::root().join("target/release/examples/hello_http")
}

/// Where the benchmarks write reports: `target/bench/`.
pub fn out_dir() -> anyhow::Result<PathBuf> {
    let dir = run::root().join("target/bench");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// The CPUs for the server and for the clients: the first and the last one. On a one-CPU
/// machine both are CPU 0 (the figures then measure sharing, and a note says so).
pub fn cpus() -> (usize, usize) {
    let n = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    if n < 2 {
        println!("bench: one CPU only: server and clients share CPU 0");
    }
    (0, n.saturating_sub(1))
}

/// `taskset -c CPU PROGRAM`.
pub fn pinned(cpu: usize, program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut cmd = Command::new("taskset");
    cmd.arg("-c").arg(cpu.to_string()).arg(program);
    cmd
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")
        .context("binding a loopback port")?
        .local_addr()?
        .port())
}

/// `/proc/loadavg`'s first three fields.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "?".into(),
        |s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
    )
}

/// A server process, stopped (SIGINT, then SIGKILL) when dropped.
pub struct Server {
    child: Child,
    pub addr: String,
}

impl Server {
    /// `inferscope sim --zero-cost` with a small corpus on `cpu`, plus `extra` flags.
    pub fn zero_cost_sim(cpu: usize, extra: &[&str]) -> anyhow::Result<Self> {
        let addr = format!("127.0.0.1:{}", free_port()?);
        let mut cmd = pinned(cpu, inferscope_bin());
        cmd.args([
            "sim",
            "--zero-cost",
            "--corpus-size",
            "100",
            "--listen",
            &addr,
        ])
        .args(extra);
        Self::start(cmd, addr, "inferscope sim --zero-cost")
    }

    /// Spawns `cmd` and waits until `addr` accepts connections.
    pub fn start(mut cmd: Command, addr: String, what: &str) -> anyhow::Result<Self> {
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {what} ({cmd:?})"))?;
        let mut server = Self { child, addr };
        let deadline = Instant::now() + Duration::from_mins(1);
        while TcpStream::connect(&server.addr).is_err() {
            if let Some(st) = server.child.try_wait()? {
                bail!("{what} exited before serving {} ({st})", server.addr);
            }
            if Instant::now() > deadline {
                bail!("{what} did not serve {} within 60 s", server.addr);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(server)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Resident set size of `pid`, MiB.
pub fn rss_mib(pid: u32) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .context("no VmRSS in /proc/PID/status")?;
    Ok(kib / 1024.0)
}

/// CPU time (user + system) of a process so far, in seconds.
pub fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    // After the comm, utime and stime are the 12th and 13th fields (clock ticks of 1/100 s).
    let ticks = |i: usize| -> anyhow::Result<f64> {
        Ok(fields
            .get(i)
            .context("short /proc/PID/stat")?
            .parse::<f64>()?)
    };
    Ok((ticks(11)? + ticks(12)?) / 100.0)
}

/// Runs `inferscope stress ARGS --no-records -q --out OUT` pinned to `cpu` and returns the
/// report's first phase.
pub fn stress(cpu: usize, args: &[&str], out: &Path) -> anyhow::Result<serde_json::Value> {
    let mut cmd = pinned(cpu, inferscope_bin());
    cmd.arg("stress")
        .args(args)
        .args(["--no-records", "-q", "--out"])
        .arg(out);
    let o = run::output(&mut cmd)?;
    if !o.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    let report = read_json(out)?;
    report
        .pointer("/phases/0")
        .cloned()
        .with_context(|| format!("{} has no phase", out.display()))
}

/// `inferscope stress` with `streams` closed-loop streams of `tokens` output tokens each
/// against the sim at `server` for `secs` (`extra`: e.g. `--endpoint completions`); the phase.
pub fn stress_streams(
    cpu: usize,
    server: &Server,
    extra: &[&str],
    (streams, tokens, secs): (usize, u32, u32),
    out: &Path,
) -> anyhow::Result<serde_json::Value> {
    let (target, tokens, streams, secs) = (
        format!("http://{}", server.addr),
        tokens.to_string(),
        streams.to_string(),
        format!("{secs}s"),
    );
    let mut args = vec!["--target", &target, "--model", "inferscope-sim"];
    args.extend(extra);
    args.extend([
        "--max-tokens",
        &tokens,
        "--connections",
        &streams,
        "--duration",
        &secs,
    ]);
    stress(cpu, &args, out)
}

pub fn read_json(path: &Path) -> anyhow::Result<serde_json::Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// A number at a JSON pointer, with the path in the error.
pub fn num(v: &serde_json::Value, pointer: &str) -> anyhow::Result<f64> {
    v.pointer(pointer)
        .and_then(serde_json::Value::as_f64)
        .with_context(|| format!("no number at {pointer}"))
}

pub fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// `min-max` of a series, for the spread across rounds.
pub fn spread(v: &[f64], digits: usize) -> String {
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{min:.digits$}-{max:.digits$}")
}

/// What a process used over its whole life, sampled from `/proc/PID` while it ran.
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    /// Peak resident set (`VmHWM`), MiB.
    pub peak_rss_mib: f64,
    /// CPU time, user + system, seconds.
    pub cpu_s: f64,
    /// Wall time, seconds.
    pub wall_s: f64,
}

/// A `/proc/PID/status` field in kB, as MiB.
fn status_mib(pid: u32, field: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())?;
    Some(kib / 1024.0)
}

/// Runs `cmd` to its end, its stdout and stderr to `log`, sampling its peak RSS and CPU time
/// every 100 ms (the last sample before it exits: a reaped process has no `/proc` entry).
pub fn watched(cmd: &mut Command, log: &Path) -> anyhow::Result<(std::process::ExitStatus, Usage)> {
    let out = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let mut child = cmd
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .with_context(|| format!("starting {cmd:?}"))?;
    let pid = child.id();
    let t0 = Instant::now();
    let mut usage = Usage::default();
    loop {
        if let Some(st) = child.try_wait()? {
            usage.wall_s = t0.elapsed().as_secs_f64();
            return Ok((st, usage));
        }
        if let Some(hwm) = status_mib(pid, "VmHWM:") {
            usage.peak_rss_mib = usage.peak_rss_mib.max(hwm);
        }
        if let Ok(cpu) = cpu_seconds(pid) {
            usage.cpu_s = cpu;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The hard and soft `RLIMIT_NOFILE` this process (and its children) run under, from
/// `/proc/self/limits`.
pub fn fd_limits() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    let mut v = line
        .trim_start_matches("Max open files")
        .split_whitespace()
        .map(|x| x.parse::<u64>().unwrap_or(u64::MAX));
    let soft = v.next()?;
    let hard = v.next()?;
    Some((soft, hard))
}

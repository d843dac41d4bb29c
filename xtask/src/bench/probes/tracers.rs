//! The processes the probe benchmark starts and stops (the daemon, bpftrace, `inferscope`
//! commands, the workload), and the daemon's HTTP API it reads.

use std::{
    io::{Read as _, Write as _},
    net::TcpStream,
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{Context as _, bail};

use crate::bench::procs;
use crate::run;

pub(super) const DAEMON_ADDR: &str = "127.0.0.1:19465";
pub(super) const SECS: f64 = 4.0;

/// bpftrace's runqlat on the same tracepoints and with the same re-queue rule. Like bcc's
/// runqlat (and inferscope), the idle task is not a task waiting for a CPU: pid 0 is skipped,
/// else its "wait" (the time its CPU was busy) fills the 0.5-1 ms buckets.
pub(super) const BPFTRACE_RUNQLAT: &str = r"
tracepoint:sched:sched_wakeup, tracepoint:sched:sched_wakeup_new { @q[args->pid] = nsecs; }
tracepoint:sched:sched_switch {
  if ((args->prev_state & 0xff) == 0 && args->prev_pid != 0) { @q[args->prev_pid] = nsecs; }
  $ns = @q[args->next_pid];
  if ($ns) { @usecs = hist((nsecs - $ns) / 1000); delete(@q[args->next_pid]); }
}
";

/// `inferscope` on [`tracer_cpu`].
pub(super) fn inferscope() -> Command {
    procs::pinned(tracer_cpu(), procs::inferscope_bin())
}

/// Runs workload `kind` for `secs`; on one CPU when `cpu` is given (both ends of the ping-pong
/// then take turns on it: every round trip is two context switches, and the run-to-run spread
/// of an unpinned run, which depends on where the scheduler places the two ends, is gone).
pub(super) fn workload_on(cpu: Option<usize>, kind: &str, secs: f64) -> anyhow::Result<f64> {
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

pub(super) fn workload(kind: &str, secs: f64) -> anyhow::Result<f64> {
    workload_on(None, kind, secs)
}

/// The CPU the tracers' own processes run on, away from the pinned workload: the overhead
/// table measures what the kernel hooks cost the workload (the daemon's own CPU is measured
/// apart, at idle).
pub(super) fn tracer_cpu() -> usize {
    procs::cpus().0
}

/// Starts the daemon watching pid 1 (every hook attached, programs run on every event).
pub(super) fn start_daemon() -> anyhow::Result<Child> {
    start_daemon_with(&["--pid", "1"])
}

/// Starts the daemon with `args` (what to watch, the window); its logs are dropped.
pub(super) fn start_daemon_with(args: &[&str]) -> anyhow::Result<Child> {
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

pub(super) fn start_bpftrace(script: &str) -> anyhow::Result<Child> {
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
pub(super) fn stop(mut child: Child) -> anyhow::Result<String> {
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

pub(super) fn http_get(addr: &str, path: &str) -> anyhow::Result<String> {
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

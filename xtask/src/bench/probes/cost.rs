//! The daemon's own cost: CPU and RSS at idle, losses under the heaviest workload, and CPU and
//! RSS with verdicts on beside one sim and three under load.

use std::{
    process::{Child, Stdio},
    time::Duration,
};

use anyhow::Context as _;

use super::parse::summary_field;
use super::tracers::{
    DAEMON_ADDR, SECS, http_get, inferscope, start_daemon, start_daemon_with, stop, workload,
};
use crate::bench::{procs, table};

pub(super) fn idle_cost() -> anyhow::Result<()> {
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
pub(super) fn loaded_cost() -> anyhow::Result<()> {
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

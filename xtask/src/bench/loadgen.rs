//! `cargo xtask bench loadgen`: the load generator against its peers, side by side in one run.
//!
//! 1. Throughput: `hello_http` on one CPU answers `GET /`; on another CPU `wrk`, `oha` and
//!    `inferscope stress` (closed loop, one connection per user) run in interleaved rounds at
//!    the same connection count and duration; requests/s and the ratios are printed.
//! 2. Streaming accuracy (see `accuracy`): inferscope and guidellm against the `fixed` sim.
use std::process::Command;

use anyhow::Context as _;

use super::{
    accuracy, peers,
    procs::{self, Server},
    table,
};
use crate::run;

const CONNECTIONS: usize = 16;
const SECS: u32 = 5;
const ROUNDS: usize = 3;

pub fn run() -> anyhow::Result<()> {
    procs::build_release()?;
    let oha = peers::oha();
    if let Err(e) = &oha {
        println!("bench: oha unavailable, comparing with wrk only: {e:#}");
    }
    throughput(oha.ok().as_deref())?;
    accuracy::run()
}

fn throughput(oha: Option<&std::path::Path>) -> anyhow::Result<()> {
    let (server_cpu, client_cpu) = procs::cpus();
    println!(
        "\n== plain HTTP GET throughput: hello_http on CPU {server_cpu}, clients on CPU {client_cpu}, \
         {CONNECTIONS} connections, {SECS} s per run, {ROUNDS} rounds interleaved (load average {})",
        procs::load_average()
    );
    let addr = format!("127.0.0.1:{}", procs::free_port()?);
    let mut cmd = procs::pinned(server_cpu, procs::hello_http_bin());
    cmd.args([addr.as_str(), "1"]);
    let server = Server::start(cmd, addr, "examples/hello_http")?;
    let url = format!("http://{}/", server.addr);
    let out = procs::out_dir()?.join("loadgen-get.json");
    let (mut wrk, mut oha_rps, mut ours) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let mut w = procs::pinned(client_cpu, "wrk");
        w.args([
            "-t1",
            &format!("-c{CONNECTIONS}"),
            &format!("-d{SECS}s"),
            &url,
        ]);
        wrk.push(requests_per_sec(&mut w).context("wrk (cargo xtask setup installs it)")?);
        if let Some(bin) = oha {
            let mut o = procs::pinned(client_cpu, bin);
            o.args(["-c", &CONNECTIONS.to_string(), "-z", &format!("{SECS}s")])
                .args(["--no-tui", &url]);
            oha_rps.push(requests_per_sec(&mut o).context("oha")?);
        }
        let phase = procs::stress(
            client_cpu,
            &[
                "--target",
                &url,
                "--method",
                "GET",
                "--connections",
                &CONNECTIONS.to_string(),
                "--duration",
                &format!("{SECS}s"),
            ],
            &out,
        )?;
        if procs::num(&phase, "/error_rate")? > 0.0 {
            println!("bench: inferscope stress saw errors: {}", phase["counts"]);
        }
        ours.push(procs::num(&phase, "/requests_per_s")?);
    }
    drop(server);
    let row = |tool: &str, v: &[f64], ratio: String| {
        vec![
            tool.to_string(),
            format!("{:.0}", procs::mean(v)),
            procs::spread(v, 0),
            ratio,
        ]
    };
    let per_round = |peer: &[f64]| {
        let r: Vec<f64> = ours.iter().zip(peer).map(|(a, b)| a / b).collect();
        format!(
            "{:.2} ({})",
            procs::mean(&ours) / procs::mean(peer),
            procs::spread(&r, 2)
        )
    };
    let mut rows = vec![row("wrk", &wrk, "-".into())];
    if !oha_rps.is_empty() {
        rows.push(row("oha", &oha_rps, "-".into()));
    }
    rows.push(row("inferscope stress", &ours, "-".into()));
    if !oha_rps.is_empty() {
        rows.push(vec![
            "inferscope / oha".into(),
            String::new(),
            String::new(),
            per_round(&oha_rps),
        ]);
    }
    rows.push(vec![
        "inferscope / wrk".into(),
        String::new(),
        String::new(),
        per_round(&wrk),
    ]);
    table(
        &[
            "client",
            "req/s (mean)",
            "req/s (min-max)",
            "ratio of means (per round)",
        ],
        &rows,
    );
    println!(
        "  target: inferscope / oha >= 1.0. Load average now {}.",
        procs::load_average()
    );
    Ok(())
}

/// Runs `wrk` or `oha` and reads the `Requests/sec:` line both print.
fn requests_per_sec(cmd: &mut Command) -> anyhow::Result<f64> {
    let text = run::stdout(cmd)?;
    parse_requests_per_sec(&text).with_context(|| format!("no `Requests/sec:` in:\n{text}"))
}

fn parse_requests_per_sec(text: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_wrk_and_oha_rates() {
        let wrk = "Running 5s test @ http://127.0.0.1:8089/\n  1 threads and 16 connections\n\
                   Requests/sec:  21503.44\nTransfer/sec:      1.68MB\n";
        assert_eq!(parse_requests_per_sec(wrk), Some(21503.44));
        let oha = "Summary:\n  Success rate:\t100.00%\n  Total:\t5.0012 secs\n  Requests/sec:\t15321.2241\n";
        assert_eq!(parse_requests_per_sec(oha), Some(15321.2241));
        assert_eq!(parse_requests_per_sec("nothing"), None);
    }
}

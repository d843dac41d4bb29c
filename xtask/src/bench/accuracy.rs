//! Streaming accuracy of `cargo xtask bench loadgen`: `inferscope sim --profile fixed` sends
//! every token at exactly arrival + 50 ms + i x 10 ms; `inferscope stress` and then `guidellm`
//! keep 1,000 streams open (closed loop) against it and each tool's TTFT p50 and ITL p99 are
//! compared with the truth. The sim's own histograms (`/metrics`) say how late the server itself
//! was, so client error and server lateness can be told apart.
use std::{
    io::{Read as _, Write as _},
    net::TcpStream,
    path::Path,
};

use anyhow::Context as _;

use super::{
    peers,
    procs::{self, Server},
    table,
};
use crate::run;

const TTFT_MS: f64 = 50.0;
const ITL_MS: f64 = 10.0;
const STREAMS: usize = 1000;
const SECS: u32 = 20;
const TOKENS: u32 = 64;
const TTFT_TARGET_MS: f64 = 5.0;
const ITL_TARGET_MS: f64 = 2.0;

/// What a tool measured, and the sim's own mean TTFT and ITL over the same run.
struct Measured {
    ttft_p50: f64,
    itl_p99: f64,
    requests: f64,
    failed: f64,
    server_ttft_mean: f64,
    server_itl_mean: f64,
}

pub fn run() -> anyhow::Result<()> {
    let (server_cpu, client_cpu) = procs::cpus();
    println!(
        "\n== streaming accuracy: sim `fixed` TTFT {TTFT_MS} ms / ITL {ITL_MS} ms on CPU {server_cpu}, \
         {STREAMS} closed-loop streams of {TOKENS} tokens for {SECS} s from CPU {client_cpu} \
         (load average {})",
        procs::load_average()
    );
    let addr = format!("127.0.0.1:{}", procs::free_port()?);
    let mut cmd = procs::pinned(server_cpu, procs::inferscope_bin());
    cmd.args([
        "sim",
        "--profile",
        "fixed",
        "--ttft-ms",
        "50",
        "--itl-ms",
        "10",
    ])
    .args([
        "--corpus-size",
        "100",
        "--max-waiting",
        "100000",
        "--listen",
        &addr,
    ]);
    let sim = Server::start(cmd, addr, "inferscope sim --profile fixed")?;
    let mut rows = Vec::new();
    match measured(&sim, || inferscope(&sim, client_cpu)) {
        Ok(m) => rows.push(row("inferscope stress", &m)),
        Err(e) => println!("bench: inferscope stress failed: {e:#}"),
    }
    match measured(&sim, || guidellm(&sim, client_cpu)) {
        Ok(m) => rows.push(row("guidellm", &m)),
        Err(e) => println!("bench: guidellm skipped: {e:#}"),
    }
    drop(sim);
    table(
        &[
            "client",
            "requests (failed)",
            "TTFT p50 ms",
            "TTFT p50 error",
            "ITL p99 ms",
            "ITL p99 error",
            "sim's own TTFT / ITL mean ms",
        ],
        &rows,
    );
    println!(
        "  targets: TTFT p50 error <= {TTFT_TARGET_MS} ms, ITL p99 error <= {ITL_TARGET_MS} ms. \
         guidellm's ITL is per request ((E2E - TTFT) / (tokens - 1)), inferscope's is every gap. \
         Load average now {}.",
        procs::load_average()
    );
    Ok(())
}

fn row(tool: &str, m: &Measured) -> Vec<String> {
    let mark = |err: f64, target: f64| if err.abs() <= target { "" } else { " (over)" };
    let (te, ie) = (m.ttft_p50 - TTFT_MS, m.itl_p99 - ITL_MS);
    vec![
        tool.to_string(),
        format!("{:.0} ({:.0})", m.requests, m.failed),
        format!("{:.1}", m.ttft_p50),
        format!("{te:+.1} ms{}", mark(te, TTFT_TARGET_MS)),
        format!("{:.1}", m.itl_p99),
        format!("{ie:+.1} ms{}", mark(ie, ITL_TARGET_MS)),
        format!("{:.1} / {:.1}", m.server_ttft_mean, m.server_itl_mean),
    ]
}

/// Runs `client` and fills in the sim's mean TTFT and ITL over the same interval.
fn measured(
    sim: &Server,
    client: impl FnOnce() -> anyhow::Result<Measured>,
) -> anyhow::Result<Measured> {
    let before = sim_histograms(&sim.addr)?;
    let mut m = client()?;
    let after = sim_histograms(&sim.addr)?;
    let mean = |i: usize| 1e3 * (after[i].0 - before[i].0) / (after[i].1 - before[i].1).max(1.0);
    m.server_ttft_mean = mean(0);
    m.server_itl_mean = mean(1);
    Ok(m)
}

fn inferscope(sim: &Server, cpu: usize) -> anyhow::Result<Measured> {
    let out = procs::out_dir()?.join("loadgen-stream.json");
    let p = procs::stress_streams(cpu, sim, &[], (STREAMS, TOKENS, SECS), &out)?;
    Ok(Measured {
        ttft_p50: procs::num(&p, "/latency_ms/ttft/p50")?,
        itl_p99: procs::num(&p, "/latency_ms/itl/p99")?,
        requests: procs::num(&p, "/counts/finished")?,
        failed: procs::num(&p, "/counts/finished")? - procs::num(&p, "/counts/ok")?,
        server_ttft_mean: f64::NAN,
        server_itl_mean: f64::NAN,
    })
}

fn guidellm(sim: &Server, cpu: usize) -> anyhow::Result<Measured> {
    let bin = peers::guidellm()?;
    let tokenizer = peers::local_tokenizer()?;
    let dir = procs::out_dir()?.join("guidellm");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let report = dir.join("benchmarks.json");
    let mut cmd = procs::pinned(cpu, bin);
    cmd.current_dir(&dir)
        .arg("run")
        .arg(format!(
            "--backend=kind=openai_http,target=http://{},model=inferscope-sim,\
             request_format=/v1/chat/completions,max_tokens={TOKENS}",
            sim.addr
        ))
        .arg(format!("--profile=kind=concurrent,streams={STREAMS}"))
        .arg(format!("--constraint=kind=max_duration,seconds={SECS}"))
        .arg(format!(
            "--tokenizer=kind=huggingface_auto,model={}",
            tokenizer.display()
        ))
        .arg(format!(
            "--data=kind=synthetic_text,prompt_tokens=16,output_tokens={TOKENS}"
        ))
        .arg(format!("--output=kind=json,path={}", report.display()))
        .arg("--disable-console-interactive")
        .env("HF_HUB_OFFLINE", "1");
    let o = run::output(&mut cmd)?;
    if !report.exists() {
        let err = String::from_utf8_lossy(&o.stderr);
        let tail: Vec<&str> = err.lines().rev().take(5).collect();
        anyhow::bail!(
            "guidellm wrote no report ({}): {}",
            o.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        );
    }
    parse_guidellm(&report)
}

/// `benchmarks[0].metrics`: TTFT median and ITL p99 of successful requests, in ms.
fn parse_guidellm(path: &Path) -> anyhow::Result<Measured> {
    let v = procs::read_json(path)?;
    let b = v
        .pointer("/benchmarks/0")
        .with_context(|| format!("{} has no benchmark", path.display()))?;
    let m = b.get("metrics").context("guidellm report: no metrics")?;
    let count = |key: &str| -> f64 {
        m.pointer(&format!("/request_totals/{key}"))
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(f64::NAN)
    };
    Ok(Measured {
        ttft_p50: procs::num(m, "/time_to_first_token_ms/successful/median")?,
        itl_p99: procs::num(m, "/inter_token_latency_ms/successful/percentiles/p99")?,
        requests: count("total"),
        failed: count("errored") + count("incomplete"),
        server_ttft_mean: f64::NAN,
        server_itl_mean: f64::NAN,
    })
}

/// `(sum, count)` of the sim's `vllm:time_to_first_token_seconds` and
/// `vllm:inter_token_latency_seconds` histograms, over all label sets.
fn sim_histograms(addr: &str) -> anyhow::Result<[(f64, f64); 2]> {
    let mut s = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    Ok([
        sum_count(&text, "vllm:time_to_first_token_seconds"),
        sum_count(&text, "vllm:inter_token_latency_seconds"),
    ])
}

fn sum_count(text: &str, name: &str) -> (f64, f64) {
    let total = |suffix: &str| -> f64 {
        let key = format!("{name}{suffix}");
        text.lines()
            .filter(|l| {
                l.strip_prefix(&key)
                    .is_some_and(|r| r.starts_with([' ', '{']))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    (total("_sum"), total("_count"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_histograms_over_labels() {
        let text = "# TYPE vllm:time_to_first_token_seconds histogram\n\
            vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"0.1\"} 3\n\
            vllm:time_to_first_token_seconds_sum{model_name=\"m\"} 0.15\n\
            vllm:time_to_first_token_seconds_count{model_name=\"m\"} 3\n\
            vllm:time_to_first_token_seconds_sum{model_name=\"n\"} 0.05\n\
            vllm:time_to_first_token_seconds_count{model_name=\"n\"} 1\n";
        let (sum, count) = sum_count(text, "vllm:time_to_first_token_seconds");
        assert!((sum - 0.2).abs() < 1e-9);
        assert!((count - 4.0).abs() < 1e-9);
        assert_eq!(
            sum_count(text, "vllm:inter_token_latency_seconds"),
            (0.0, 0.0)
        );
    }
}

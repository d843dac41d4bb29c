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
    server_itl_p99: f64,
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
    match measured(&sim, || inferscope(&sim, client_cpu, STREAMS)) {
        Ok(m) => rows.push(row("inferscope stress", &m)),
        Err(e) => println!("bench: inferscope stress failed: {e:#}"),
    }
    // The same at a quarter of the streams, where the sim has CPU to spare and keeps time:
    // what the client's own error is once the server is on time.
    match measured(&sim, || inferscope(&sim, client_cpu, STREAMS / 4)) {
        Ok(m) => rows.push(row(
            &format!("inferscope stress, {} streams", STREAMS / 4),
            &m,
        )),
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
            "sim's own TTFT mean / ITL mean / ITL p99 ms",
        ],
        &rows,
    );
    println!(
        "  targets: TTFT p50 error <= {TTFT_TARGET_MS} ms, ITL p99 error <= {ITL_TARGET_MS} ms. \
         guidellm's ITL is per request ((E2E - TTFT) / (tokens - 1)), inferscope's is every gap. \
         The sim's ITL p99 is read from its vLLM histogram buckets (coarse: 10, 25, 50, 75, 100 ms). \
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
        format!(
            "{:.1} / {:.1} / {:.0}",
            m.server_ttft_mean, m.server_itl_mean, m.server_itl_p99
        ),
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
    let (a, b) = (&after.sums, &before.sums);
    let mean = |i: usize| 1e3 * (a[i].0 - b[i].0) / (a[i].1 - b[i].1).max(1.0);
    m.server_ttft_mean = mean(0);
    m.server_itl_mean = mean(1);
    let itl: Vec<(f64, f64)> = after
        .itl_buckets
        .iter()
        .map(|&(le, n)| {
            let was = before
                .itl_buckets
                .iter()
                .find(|x| x.0.total_cmp(&le).is_eq())
                .map_or(0.0, |x| x.1);
            (le, n - was)
        })
        .collect();
    m.server_itl_p99 = 1e3 * bucket_quantile(&itl, 0.99);
    Ok(m)
}

fn inferscope(sim: &Server, cpu: usize, streams: usize) -> anyhow::Result<Measured> {
    let out = procs::out_dir()?.join("loadgen-stream.json");
    let p = procs::stress_streams(cpu, sim, &[], (streams, TOKENS, SECS), &out)?;
    Ok(Measured {
        ttft_p50: procs::num(&p, "/latency_ms/ttft/p50")?,
        itl_p99: procs::num(&p, "/latency_ms/itl/p99")?,
        requests: procs::num(&p, "/counts/finished")?,
        failed: procs::num(&p, "/counts/finished")? - procs::num(&p, "/counts/ok")?,
        server_ttft_mean: f64::NAN,
        server_itl_mean: f64::NAN,
        server_itl_p99: f64::NAN,
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
        server_itl_p99: f64::NAN,
    })
}

/// `(sum, count)` of the sim's `vllm:time_to_first_token_seconds` and
/// `vllm:inter_token_latency_seconds` histograms, over all label sets.
/// The sim's own TTFT and ITL histograms: (sum, count) of each, and the ITL buckets.
struct SimHistograms {
    sums: [(f64, f64); 2],
    itl_buckets: Vec<(f64, f64)>,
}

fn sim_histograms(addr: &str) -> anyhow::Result<SimHistograms> {
    let mut s = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    Ok(SimHistograms {
        sums: [
            sum_count(&text, "vllm:time_to_first_token_seconds"),
            sum_count(&text, "vllm:inter_token_latency_seconds"),
        ],
        itl_buckets: buckets(&text, "vllm:inter_token_latency_seconds"),
    })
}

/// Cumulative `(le, count)` buckets of histogram `name`, summed over labels, in `le` order.
fn buckets(text: &str, name: &str) -> Vec<(f64, f64)> {
    let mut by_le: Vec<(f64, f64)> = Vec::new();
    let key = format!("{name}_bucket");
    for l in text.lines().filter(|l| l.starts_with(&key)) {
        let le = l
            .split("le=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .and_then(|v| v.parse::<f64>().ok());
        let n = l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok());
        if let (Some(le), Some(n)) = (le, n) {
            match by_le.iter_mut().find(|(b, _)| b.total_cmp(&le).is_eq()) {
                Some(b) => b.1 += n,
                None => by_le.push((le, n)),
            }
        }
    }
    by_le.sort_by(|a, b| a.0.total_cmp(&b.0));
    by_le
}

/// Quantile `q` of cumulative buckets, interpolated linearly inside the bucket it falls in
/// (as Prometheus' `histogram_quantile` does); seconds.
fn bucket_quantile(b: &[(f64, f64)], q: f64) -> f64 {
    let total = b.last().map_or(0.0, |l| l.1);
    let rank = q * total;
    let mut prev = (0.0, 0.0);
    for &(le, n) in b {
        if n >= rank && n > prev.1 {
            if le.is_infinite() {
                return prev.0;
            }
            return prev.0 + (le - prev.0) * (rank - prev.1) / (n - prev.1);
        }
        prev = (le, n);
    }
    f64::NAN
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

    #[test]
    fn bucket_quantiles_interpolate() {
        let text = "h_bucket{m=\"a\",le=\"0.01\"} 50\nh_bucket{m=\"b\",le=\"0.01\"} 40\n\
            h_bucket{m=\"a\",le=\"0.05\"} 55\nh_bucket{m=\"b\",le=\"0.05\"} 45\n\
            h_bucket{m=\"a\",le=\"+Inf\"} 55\nh_bucket{m=\"b\",le=\"+Inf\"} 45\n";
        let b = buckets(text, "h");
        assert_eq!(b, vec![(0.01, 90.0), (0.05, 100.0), (f64::INFINITY, 100.0)]);
        assert!((bucket_quantile(&b, 0.5) - 0.01 * 50.0 / 90.0).abs() < 1e-12);
        assert!((bucket_quantile(&b, 0.95) - 0.03).abs() < 1e-12);
    }
}

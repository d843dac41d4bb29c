//! Streaming accuracy and scale of `cargo xtask bench loadgen`. `inferscope sim --profile fixed`
//! sends every token at exactly arrival + 50 ms + i x 10 ms and exports how late it actually
//! was (`inferscope_sim_*_lateness_seconds`, and the gaps it produced, `inferscope_sim_itl_seconds`,
//! exact summaries). Against a fresh sim each, `inferscope stress` keeps 1,000, 5,000 and 10,000
//! streams open (closed loop, its default ramp), then guidellm 1,000: client error = client -
//! server for TTFT p50 and ITL p99, with the server's own lateness beside it; the client's peak
//! RSS per stream and both sides' CPU; a 10,000-stream run under `--explain` for the generator's
//! own run-queue self-check; and 1,000 streams without a ramp beside the ramped ones, whose TTFT
//! p99 must stay within 2x the server's own.
use std::{
    io::{Read as _, Write as _},
    net::TcpStream,
    path::{Path, PathBuf},
};

use anyhow::Context as _;

use super::{
    peers,
    procs::{self, Server, Usage},
    table,
};
use crate::run;

const TTFT_MS: f64 = 50.0;
const ITL_MS: f64 = 10.0;
const SCALES: [usize; 3] = [1000, 5000, 10_000];
/// The streams of the run whose peak RSS the others' is measured from.
const BASE_STREAMS: usize = 10;
const SECS: u32 = 20;
const TOKENS: u32 = 64;
const TTFT_TARGET_MS: f64 = 5.0;
const ITL_TARGET_MS: f64 = 2.0;
/// A ramped run's TTFT p99 at most this times the server's own.
const RAMPED_P99_TARGET: f64 = 2.0;
/// A process on more than this share of its CPU is the side that ran out.
const SATURATED: f64 = 0.9;

/// What the sim itself did over a run (from its exact summaries), ms.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Truth {
    ttft_p50: f64,
    ttft_p99: f64,
    itl_p99: f64,
    late_ttft_p50: f64,
    late_ttft_p99: f64,
    late_itl_p99: f64,
}

/// What a client measured, ms.
#[derive(Debug, Default)]
struct Client {
    ttft_p50: f64,
    ttft_p99: f64,
    itl_p99: f64,
    requests: f64,
    failed: f64,
    send_lag_p99: Option<f64>,
    /// p50 and p99 of the waits for new connections (`latency_ms.connect`).
    connect: Option<(f64, f64)>,
    /// `ramp_up_s` and the requests it kept apart.
    ramp: Option<(f64, f64)>,
    usage: Option<Usage>,
}

/// One client run against a fresh sim.
struct Measured {
    client: Client,
    truth: Truth,
    server_cpu_s: f64,
}

/// How `inferscope stress` is run.
#[derive(Clone, Copy)]
struct How {
    streams: usize,
    secs: u32,
    /// `ramp_up:` of the phase (`None`: the default).
    ramp: Option<&'static str>,
    /// Under `--explain` (the self-check), writing its report beside the stress report.
    explain: bool,
}

pub fn run() -> anyhow::Result<()> {
    let (server_cpu, client_cpu) = procs::cpus();
    println!(
        "\n== streaming accuracy and scale: sim `fixed` TTFT {TTFT_MS} ms / ITL {ITL_MS} ms on CPU {server_cpu}, \
         closed-loop streams of {TOKENS} tokens for {SECS} s from CPU {client_cpu}, a fresh sim per run \
         (load average {})",
        procs::load_average()
    );
    let most = SCALES[SCALES.len() - 1];
    fd_note(most);
    let cpus = (server_cpu, client_cpu);
    let stress = |how: How| measured(cpus, |sim| inferscope(sim, client_cpu, how));
    let base = stress(How {
        streams: BASE_STREAMS,
        secs: 3,
        ramp: None,
        explain: false,
    })
    .context("the baseline run of 10 streams")?;
    let base_rss = base.client.usage.map_or(0.0, |u| u.peak_rss_mib);
    let mut rows = Vec::new();
    let mut costs = Vec::new();
    let mut ramped_1000 = None;
    for streams in SCALES {
        let how = How {
            streams,
            secs: SECS,
            ramp: None,
            explain: false,
        };
        match stress(how) {
            Ok(m) => {
                rows.push(row(&format!("inferscope {streams}"), &m));
                costs.push(cost_row(streams, &m, base_rss));
                if streams == 1000 {
                    ramped_1000 = Some((m.client.ttft_p99, m.truth.ttft_p99));
                }
            }
            Err(e) => println!("bench: inferscope stress at {streams} streams failed: {e:#}"),
        }
    }
    let unramped = stress(How {
        streams: 1000,
        secs: SECS,
        ramp: Some("0s"),
        explain: false,
    });
    match &unramped {
        Ok(m) => rows.push(row("inferscope 1000, no ramp", m)),
        Err(e) => println!("bench: inferscope stress without a ramp failed: {e:#}"),
    }
    match measured(cpus, |sim| guidellm(sim, client_cpu)) {
        Ok(m) => rows.push(row("guidellm 1000", &m)),
        Err(e) => println!("bench: guidellm skipped: {e:#}"),
    }
    table(
        &[
            "client, streams",
            "requests (failed)",
            "ramp s (requests apart)",
            "TTFT p50 client / server ms",
            "TTFT p50 error",
            "ITL p99 client / server ms",
            "ITL p99 error",
            "server lateness ms: TTFT p50 / p99, ITL p99",
        ],
        &rows,
    );
    println!(
        "  error = client - server (the sim's exact TTFT and token gaps). Targets: TTFT p50 error \
         <= {TTFT_TARGET_MS} ms, ITL p99 error <= {ITL_TARGET_MS} ms. guidellm's ITL is per request \
         ((E2E - TTFT) / (tokens - 1)), inferscope's is every gap."
    );
    table(
        &[
            "streams",
            "client peak RSS MiB",
            "per stream KiB",
            "client CPU s (share)",
            "server CPU s (share)",
            "ran out",
            "send lag p99 ms",
            "connect p50 / p99 ms",
        ],
        &costs,
    );
    println!(
        "  per stream = (peak RSS - the {BASE_STREAMS}-stream run's {base_rss:.1} MiB) / (streams - {BASE_STREAMS}); \
         shares of one CPU over the client's wall time; `ran out` names a side above {:.0}%. \
         A closed loop's send lag is 0 by construction (each request is due when sent); connect: \
         the client's waits for its users' new connections (TCP connect).",
        SATURATED * 100.0
    );
    ramped_line(ramped_1000, unramped.ok().map(|m| m.client.ttft_p99));
    self_check(cpus, most);
    println!("  load average now {}.", procs::load_average());
    Ok(())
}

/// The open-file limits the runs get, and whether `most` streams fit.
fn fd_note(most: usize) {
    if let Some((soft, hard)) = procs::fd_limits() {
        // `inferscope` raises its soft limit to the hard one; each stream is one descriptor
        // in the client and one in the sim.
        println!(
            "  open files: soft {soft}, hard {hard} ({}); inferscope raises its soft limit to the hard one",
            if hard > most as u64 + 256 {
                format!("enough for {most} streams")
            } else {
                format!(
                    "too few for {most} streams: raise `ulimit -Hn`; expect client_fd_limit errors"
                )
            }
        );
    }
}

/// The ramped 1,000-stream run's TTFT p99 against the server's own, and the run without one.
fn ramped_line(ramped: Option<(f64, f64)>, unramped_p99: Option<f64>) {
    let Some((client, server)) = ramped else {
        return;
    };
    let ratio = client / server;
    println!(
        "  ramped 1000 streams: TTFT p99 {client:.1} ms, the server's own {server:.1} ms: {ratio:.2}x \
         (target <= {RAMPED_P99_TARGET}x: {}){}",
        if ratio <= RAMPED_P99_TARGET {
            "met"
        } else {
            "NOT met"
        },
        unramped_p99.map_or(String::new(), |u| format!(
            "; without a ramp {u:.1} ms ({:.1}x)",
            u / server
        ))
    );
}

/// `streams` under `--explain`: the generator's own run-queue delay and the verdict on it.
fn self_check(cpus: (usize, usize), streams: usize) {
    let how = How {
        streams,
        secs: 10,
        ramp: None,
        explain: true,
    };
    let dir = run_dir(how);
    match measured(cpus, |sim| inferscope(sim, cpus.1, how)) {
        Ok(_) => match read_self_check(&dir.join("report.json")) {
            Ok(line) => println!("  self-check at {streams} streams (--explain): {line}"),
            Err(e) => println!("  self-check at {streams} streams: no explain report: {e:#}"),
        },
        Err(e) => println!("  self-check at {streams} streams (--explain) failed: {e:#}"),
    }
}

/// The explain report's generator run-queue p99 (highest window) and the phase's verdict.
fn read_self_check(path: &Path) -> anyhow::Result<String> {
    let v = procs::read_json(path)?;
    let windows = v
        .pointer("/timeline/windows")
        .and_then(serde_json::Value::as_array)
        .context("no timeline windows")?;
    let runq: Vec<f64> = windows
        .iter()
        .filter_map(|w| w.pointer("/runq/loadgen_p99_us")?.as_f64())
        .collect();
    let phase = v.pointer("/phases/0").context("no phase verdict")?;
    let dominant = phase
        .get("dominant")
        .and_then(serde_json::Value::as_str)
        .unwrap_or("?");
    let suspect = phase
        .get("untrustworthy")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    let max = runq.iter().copied().fold(f64::NAN, f64::max);
    Ok(format!(
        "generator run-queue p99 {} over {} windows; verdict `{dominant}`{}",
        if runq.is_empty() {
            "not watched".to_string()
        } else {
            format!("max {max:.0} µs, median {:.0} µs", median(&runq))
        },
        windows.len(),
        if suspect {
            ", the report flags its own latencies as suspect"
        } else {
            ", latencies trusted"
        }
    ))
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s.get(s.len() / 2).copied().unwrap_or(f64::NAN)
}

fn row(tool: &str, m: &Measured) -> Vec<String> {
    let mark = |err: f64, target: f64| if err.abs() <= target { "" } else { " (over)" };
    let (c, t) = (&m.client, &m.truth);
    let (te, ie) = (c.ttft_p50 - t.ttft_p50, c.itl_p99 - t.itl_p99);
    vec![
        tool.to_string(),
        format!("{:.0} ({:.0})", c.requests, c.failed),
        c.ramp
            .map_or("-".into(), |(s, n)| format!("{s:.1} ({n:.0})")),
        format!("{:.1} / {:.1}", c.ttft_p50, t.ttft_p50),
        format!("{te:+.1} ms{}", mark(te, TTFT_TARGET_MS)),
        format!("{:.1} / {:.1}", c.itl_p99, t.itl_p99),
        format!("{ie:+.1} ms{}", mark(ie, ITL_TARGET_MS)),
        format!(
            "{:.2} / {:.2} / {:.2}",
            t.late_ttft_p50, t.late_ttft_p99, t.late_itl_p99
        ),
    ]
}

fn cost_row(streams: usize, m: &Measured, base_rss: f64) -> Vec<String> {
    let u = m.client.usage.unwrap_or_default();
    let wall = u.wall_s.max(1e-9);
    let (client, server) = (u.cpu_s / wall, m.server_cpu_s / wall);
    let out = match (client > SATURATED, server > SATURATED) {
        (true, true) => "both",
        (true, false) => "client",
        (false, true) => "server",
        (false, false) => "neither",
    };
    let per_stream = (u.peak_rss_mib - base_rss) * 1024.0 / (streams - BASE_STREAMS) as f64;
    vec![
        streams.to_string(),
        format!("{:.1}", u.peak_rss_mib),
        format!("{per_stream:.1}"),
        format!("{:.1} ({:.0}%)", u.cpu_s, client * 100.0),
        format!("{:.1} ({:.0}%)", m.server_cpu_s, server * 100.0),
        out.into(),
        m.client
            .send_lag_p99
            .map_or("-".into(), |v| format!("{v:.2}")),
        m.client
            .connect
            .map_or("-".into(), |(p50, p99)| format!("{p50:.2} / {p99:.2}")),
    ]
}

/// Starts a fresh `fixed` sim, runs `client` against it, and reads what the sim did.
fn measured(
    (server_cpu, _): (usize, usize),
    client: impl FnOnce(&Server) -> anyhow::Result<Client>,
) -> anyhow::Result<Measured> {
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
    let cpu0 = procs::cpu_seconds(sim.pid())?;
    let client = client(&sim)?;
    let server_cpu_s = procs::cpu_seconds(sim.pid())? - cpu0;
    let truth = truth(&sim.addr)?;
    Ok(Measured {
        client,
        truth,
        server_cpu_s,
    })
}

fn run_dir(how: How) -> PathBuf {
    let tag = match (how.ramp, how.explain) {
        (_, true) => "-explain",
        (Some(_), false) => "-ramp-given",
        (None, false) => "",
    };
    procs::out_dir()
        .unwrap_or_else(|_| PathBuf::from("target/bench"))
        .join(format!("streams-{}{tag}", how.streams))
}

/// The scenario of `how` against `addr`.
fn scenario(addr: &str, how: How) -> String {
    let ramp = how
        .ramp
        .map_or(String::new(), |r| format!("    ramp_up: {r}\n"));
    format!(
        "name: bench-streams\ntarget: http://{addr}\nphases:\n  - name: streams\n    duration: {}s\n    \
         load: {{shape: concurrency, users: {}}}\n{ramp}    \
         request: {{endpoint: chat, model: inferscope-sim, max_tokens: {TOKENS}}}\n",
        how.secs, how.streams
    )
}

fn inferscope(sim: &Server, cpu: usize, how: How) -> anyhow::Result<Client> {
    let dir = run_dir(how);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let file = dir.join("scenario.yaml");
    std::fs::write(&file, scenario(&sim.addr, how))?;
    let out = dir.join("stress.json");
    let mut cmd = procs::pinned(cpu, procs::inferscope_bin());
    cmd.arg("stress")
        .arg(&file)
        .args(["--no-records", "-q", "--out"])
        .arg(&out);
    if how.explain {
        cmd.args(["--explain", "--report-dir"]).arg(&dir);
    }
    let log = dir.join("stress.log");
    let (status, usage) = procs::watched(&mut cmd, &log)?;
    if !out.exists() {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(5).collect();
        anyhow::bail!(
            "{cmd:?} wrote no report ({status}): {}",
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        );
    }
    let report = procs::read_json(&out)?;
    let p = report
        .pointer("/phases/0")
        .with_context(|| format!("{} has no phase", out.display()))?;
    let finished = procs::num(p, "/counts/finished")?;
    Ok(Client {
        ttft_p50: procs::num(p, "/latency_ms/ttft/p50")?,
        ttft_p99: procs::num(p, "/latency_ms/ttft/p99")?,
        itl_p99: procs::num(p, "/latency_ms/itl/p99")?,
        requests: finished,
        failed: finished - procs::num(p, "/counts/ok")?,
        send_lag_p99: procs::num(p, "/latency_ms/send_lag/p99").ok(),
        connect: procs::num(p, "/latency_ms/connect/p50")
            .ok()
            .zip(procs::num(p, "/latency_ms/connect/p99").ok()),
        ramp: procs::num(p, "/ramp/ramp_up_s")
            .ok()
            .map(|s| (s, procs::num(p, "/ramp/requests").unwrap_or(0.0))),
        usage: Some(usage),
    })
}

fn guidellm(sim: &Server, cpu: usize) -> anyhow::Result<Client> {
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
        .arg(format!("--profile=kind=concurrent,streams={}", SCALES[0]))
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

/// `benchmarks[0].metrics`: TTFT median and p99 and ITL p99 of successful requests, in ms.
fn parse_guidellm(path: &Path) -> anyhow::Result<Client> {
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
    Ok(Client {
        ttft_p50: procs::num(m, "/time_to_first_token_ms/successful/median")?,
        ttft_p99: procs::num(m, "/time_to_first_token_ms/successful/percentiles/p99")
            .unwrap_or(f64::NAN),
        itl_p99: procs::num(m, "/inter_token_latency_ms/successful/percentiles/p99")?,
        requests: count("total"),
        failed: count("errored") + count("incomplete"),
        ..Client::default()
    })
}

/// The sim's exact summaries over its whole life (it is fresh for each run).
fn truth(addr: &str) -> anyhow::Result<Truth> {
    let mut s = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    parse_truth(&text)
}

fn parse_truth(text: &str) -> anyhow::Result<Truth> {
    let q = |name: &str, q: &str| -> anyhow::Result<f64> {
        quantile(text, name, q)
            .map(|s| s * 1e3)
            .with_context(|| format!("the sim exports no {name} quantile {q} (an older binary?)"))
    };
    let (ttft, itl, gap) = (
        "inferscope_sim_ttft_lateness_seconds",
        "inferscope_sim_itl_lateness_seconds",
        "inferscope_sim_itl_seconds",
    );
    let late_ttft_p50 = q(ttft, "0.5")?;
    let late_ttft_p99 = q(ttft, "0.99")?;
    Ok(Truth {
        // The fixed TTFT is exact: the server's own TTFT is it plus its lateness.
        ttft_p50: TTFT_MS + late_ttft_p50,
        ttft_p99: TTFT_MS + late_ttft_p99,
        itl_p99: q(gap, "0.99")?,
        late_ttft_p50,
        late_ttft_p99,
        late_itl_p99: q(itl, "0.99")?,
    })
}

/// Quantile `q` of summary `name` (the first label set that has it), in the summary's unit.
fn quantile(text: &str, name: &str, q: &str) -> Option<f64> {
    let label = format!("quantile=\"{q}\"");
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|r| r.starts_with('{') && r.contains(&label))
        })
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_sims_exact_summaries() {
        let text = "# TYPE inferscope_sim_ttft_lateness_seconds summary\n\
            inferscope_sim_ttft_lateness_seconds{model_name=\"m\",quantile=\"0.5\"} 0.0012\n\
            inferscope_sim_ttft_lateness_seconds{model_name=\"m\",quantile=\"0.99\"} 0.004\n\
            inferscope_sim_ttft_lateness_seconds_sum{model_name=\"m\"} 1.0\n\
            inferscope_sim_itl_lateness_seconds{model_name=\"m\",quantile=\"0.99\"} 0.002\n\
            inferscope_sim_itl_seconds{model_name=\"m\",quantile=\"0.5\"} 0.0101\n\
            inferscope_sim_itl_seconds{model_name=\"m\",quantile=\"0.99\"} 0.0115\n";
        let t = parse_truth(text).unwrap();
        assert!((t.ttft_p50 - 51.2).abs() < 1e-9, "{t:?}");
        assert!((t.ttft_p99 - 54.0).abs() < 1e-9, "{t:?}");
        assert!((t.itl_p99 - 11.5).abs() < 1e-9, "{t:?}");
        assert!((t.late_itl_p99 - 2.0).abs() < 1e-9, "{t:?}");
        let e = parse_truth("vllm:num_requests_running 1\n").unwrap_err();
        assert!(format!("{e:#}").contains("an older binary"), "{e:#}");
    }

    #[test]
    fn the_scenario_of_a_run_has_its_ramp() {
        let how = How {
            streams: 1000,
            secs: 20,
            ramp: Some("0s"),
            explain: false,
        };
        let s = scenario("127.0.0.1:9", how);
        assert!(
            s.contains("users: 1000") && s.contains("ramp_up: 0s"),
            "{s}"
        );
        let s = scenario("127.0.0.1:9", How { ramp: None, ..how });
        assert!(!s.contains("ramp_up"), "{s}");
    }

    #[test]
    fn reads_the_self_check_from_an_explain_report() {
        let dir = std::env::temp_dir().join(format!("xtask-selfcheck-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("report.json");
        let report = serde_json::json!({
            "timeline": {"windows": [
                {"runq": {"loadgen_p99_us": 40.0}},
                {"runq": {"loadgen_p99_us": 9000.0}},
                {"runq": null}
            ]},
            "phases": [{"dominant": "loadgen", "untrustworthy": true}]
        });
        std::fs::write(&path, report.to_string()).unwrap();
        let line = read_self_check(&path).unwrap();
        assert!(line.contains("max 9000 µs"), "{line}");
        assert!(line.contains("verdict `loadgen`"), "{line}");
        assert!(line.contains("suspect"), "{line}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

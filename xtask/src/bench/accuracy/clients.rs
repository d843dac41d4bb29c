//! The clients run against the sim: `inferscope stress` (its scenario, its report) and
//! guidellm.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use super::measures::{Client, How, SCALES, SECS, TOKENS};
use crate::bench::{
    peers,
    procs::{self, Server},
};
use crate::run;

pub(super) fn run_dir(how: How) -> PathBuf {
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

pub(super) fn inferscope(sim: &Server, cpu: usize, how: How) -> anyhow::Result<Client> {
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

pub(super) fn guidellm(sim: &Server, cpu: usize) -> anyhow::Result<Client> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}

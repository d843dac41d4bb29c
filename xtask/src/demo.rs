//! `cargo xtask demo`: the main job on the embedded default. Starts `inferscope sim` with a
//! profile whose KV cache is sized for the baseline but not for the peak, runs the seed's test
//! matrix (`examples/seed-matrix.yaml`: baseline -> peak -> chaos, LLM then vector search) with
//! `--explain`, prints the report and writes `target/demo/report.{json,html}`; then searches the
//! highest rate that keeps TTFT p95 under 500 ms (`--find-max`) and explains what breaks past it
//! (`target/demo/knee/`).
use std::{
    net::TcpStream,
    process::{Child, Command},
    time::Duration,
};

use anyhow::{Context as _, bail};

use crate::run;

/// The sim's listen address: the scenario's target.
const SIM_ADDR: &str = "127.0.0.1:8000";
/// Sim flags: vLLM-like engine with a KV cache that holds the baseline's working set but
/// fills up at the peak, so the peak phase has a bottleneck to explain.
const SIM_ARGS: [&str; 4] = ["--profile", "kv-pressure", "--num-gpu-blocks", "600"];

struct Sim(Child);

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn run() -> anyhow::Result<()> {
    run::status(&mut run::cargo(&[
        "build",
        "--release",
        "--package",
        "inferscope",
    ]))?;
    let bin = run::root().join("target/release/inferscope");
    if TcpStream::connect(SIM_ADDR).is_ok() {
        bail!(
            "{SIM_ADDR} is already in use: stop whatever listens there (the demo's sim needs it)"
        );
    }
    if !run::is_root() {
        println!(
            "demo: not root: the load runs and is explained from the server's metrics only; run `sudo cargo xtask demo` for the kernel evidence"
        );
    }
    println!(
        "demo: starting inferscope sim {} on {SIM_ADDR}",
        SIM_ARGS.join(" ")
    );
    let _sim = Sim(Command::new(&bin)
        .args(["sim", "--listen", SIM_ADDR])
        .args(SIM_ARGS)
        .spawn()
        .context("starting inferscope sim")?);
    for _ in 0..100 {
        if TcpStream::connect(SIM_ADDR).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = run::root().join("target/demo");
    let scenario = run::root().join("examples/seed-matrix.yaml");
    println!(
        "demo: running {} with --explain (about 2 minutes)",
        scenario.display()
    );
    let status = Command::new(&bin)
        .arg("stress")
        .arg(&scenario)
        .args(["--explain", "--quiet", "--report-dir"])
        .arg(&out)
        .status()
        .context("running inferscope stress")?;
    // Exit code 2 means an SLO failed: expected at the peak, that is what the demo explains.
    if !matches!(status.code(), Some(0 | 2)) {
        bail!("inferscope stress failed ({status})");
    }
    println!(
        "\ndemo: the highest load that keeps TTFT p95 under 500 ms (knee search, at most 60 s), and why it breaks beyond"
    );
    let knee = out.join("knee");
    let status = Command::new(&bin)
        .args(["stress", "--target", &format!("http://{SIM_ADDR}")])
        .args(["--model", "inferscope-sim", "--max-tokens", "256"])
        .args(["--find-max", "ttft_p95 < 500ms", "--rate", "8"])
        .args(["--step-duration", "5s", "--search-time", "60s"])
        .args(["--explain", "--quiet", "--report-dir"])
        .arg(&knee)
        .arg("--out")
        .arg(knee.join("search.json"))
        .status()
        .context("running inferscope stress --find-max")?;
    if !status.success() {
        bail!("inferscope stress --find-max failed ({status})");
    }
    println!(
        "demo: open {}/report.html (the matrix) and {}/report.html (past the knee) in a browser",
        out.display(),
        knee.display()
    );
    Ok(())
}

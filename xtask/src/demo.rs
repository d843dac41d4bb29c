//! `cargo xtask demo`: the main job on the embedded default. Starts `inferscope sim` with a
//! profile whose KV cache is sized for the baseline but not for the peak, runs the seed's test
//! matrix (`examples/seed-matrix.yaml`: baseline -> peak -> chaos, LLM then vector search) with
//! `--explain`, prints the report and writes `target/demo/report.{json,html}`; then searches the
//! highest rate that keeps TTFT p95 under 500 ms (`--find-max`) and explains what breaks past it
//! (`target/demo/knee/`).
//!
//! `cargo xtask demo --engine llama.cpp` runs the matrix's LLM phases
//! (`examples/seed-matrix-llamacpp.yaml`, rates scaled to what one CPU core of llama.cpp
//! sustains with the random-weight model) against llama.cpp's `llama-server` and explains them
//! (`target/demo-llamacpp/`).
use std::{
    net::TcpStream,
    process::{Child, Command},
};

use anyhow::{Context as _, bail};

use crate::run;

/// The server's listen address: the scenarios' target.
const ADDR: &str = "127.0.0.1:8000";
/// Sim flags: vLLM-like engine with a KV cache that holds the baseline's working set but
/// fills up at the peak, so the peak phase has a bottleneck to explain.
const SIM_ARGS: [&str; 4] = ["--profile", "kv-pressure", "--num-gpu-blocks", "600"];
/// llama-server flags: 4 slots of 2,048 tokens on one compute thread, so that the scaled
/// peak fills the slots and requests wait for one (its `requests_deferred`).
const LLAMA_ARGS: [&str; 6] = ["--parallel", "4", "--ctx-size", "8192", "--threads", "1"];

/// The server under load, stopped when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn run(engine: &str) -> anyhow::Result<()> {
    let llama = match engine {
        "sim" => false,
        "llama.cpp" | "llamacpp" | "llama-server" => true,
        other => bail!("--engine {other}: write sim or llama.cpp"),
    };
    run::status(&mut run::cargo(&[
        "build",
        "--release",
        "--package",
        "inferscope",
    ]))?;
    let bin = run::root().join("target/release/inferscope");
    if TcpStream::connect(ADDR).is_ok() {
        bail!("{ADDR} is already in use: stop whatever listens there (the demo's server needs it)");
    }
    if !run::is_root() {
        println!(
            "demo: not root: the load runs and is explained from the server's metrics only; run `sudo cargo xtask demo` for the kernel evidence"
        );
    }
    let (_server, scenario, out) = if llama {
        (
            start_llama()?,
            "examples/seed-matrix-llamacpp.yaml",
            run::root().join("target/demo-llamacpp"),
        )
    } else {
        println!(
            "demo: starting inferscope sim {} on {ADDR}",
            SIM_ARGS.join(" ")
        );
        let sim = Server(
            Command::new(&bin)
                .args(["sim", "--listen", ADDR])
                .args(SIM_ARGS)
                .spawn()
                .context("starting inferscope sim")?,
        );
        run::wait_for_http(&format!("http://{ADDR}/metrics"))?;
        (
            sim,
            "examples/seed-matrix.yaml",
            run::root().join("target/demo"),
        )
    };
    let scenario = run::root().join(scenario);
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
    if llama {
        println!("demo: open {}/report.html in a browser", out.display());
        return Ok(());
    }
    println!(
        "\ndemo: the highest load that keeps TTFT p95 under 500 ms (knee search, at most 60 s), and why it breaks beyond"
    );
    let knee = out.join("knee");
    let status = Command::new(&bin)
        .args(["stress", "--target", &format!("http://{ADDR}")])
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

/// Starts the llama.cpp server `cargo xtask setup` built, with its random-weight model.
fn start_llama() -> anyhow::Result<Server> {
    let (host, port) = ADDR.split_once(':').context("ADDR is host:port")?;
    println!(
        "demo: starting llama.cpp's llama-server {} on {ADDR}",
        LLAMA_ARGS.join(" ")
    );
    let mut cmd = Command::new(crate::engine::server_bin());
    crate::engine::serve_args(&mut cmd, host, port);
    let server = Server(
        cmd.args(LLAMA_ARGS)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .context("starting llama-server (cargo xtask setup builds it)")?,
    );
    run::wait_for_http(&format!("http://{ADDR}/health"))?;
    Ok(server)
}

//! `cargo xtask bench engine`: the sim checked against a production engine. One concurrency
//! sweep (1, 2, 4, 8 closed-loop streams of 64 tokens after a ~128-token prompt) runs against
//! llama.cpp's `llama-server` (the random-weight model of `cargo xtask setup`, 8 slots, one
//! compute thread) and against `inferscope sim` (profile `healthy`), each pinned to the same
//! CPU, the client on the other. It prints how TTFT and ITL grow with the load for each, as
//! ratios to one stream (docs/sim.md reads this table).
use anyhow::Context as _;

use super::{
    procs::{self, Server},
    table,
};
use crate::engine;

const STREAMS: [usize; 4] = [1, 2, 4, 8];
const TOKENS: u32 = 64;
const SECS: u32 = 10;

/// A prompt of about 128 tokens for the engine's vocabulary (whole words are single tokens).
fn prompt() -> String {
    "the request server engine batch slot prompt answer kernel network ".repeat(13)
}

pub fn run() -> anyhow::Result<()> {
    procs::build_release()?;
    anyhow::ensure!(
        engine::server_bin().exists() && engine::model().exists(),
        "llama-server or its model is missing: cargo xtask setup builds them"
    );
    let (server_cpu, client_cpu) = procs::cpus();
    println!(
        "\n== sim vs engine: {STREAMS:?} closed-loop streams of {TOKENS} tokens, {SECS} s each; \
         server on CPU {server_cpu}, client on CPU {client_cpu} (load average {})",
        procs::load_average()
    );
    let mut rows = Vec::new();
    for (name, server) in [("llama.cpp", llama(server_cpu)?), ("sim", sim(server_cpu)?)] {
        let mut first: Option<(f64, f64)> = None;
        for streams in STREAMS {
            let p = sweep_step(client_cpu, &server, streams)?;
            let (ttft, itl) = (
                procs::num(&p, "/latency_ms/ttft/p50")?,
                procs::num(&p, "/latency_ms/itl/p50")?,
            );
            let (t1, i1) = *first.get_or_insert((ttft, itl));
            rows.push(vec![
                name.to_owned(),
                streams.to_string(),
                format!("{ttft:.1}"),
                format!("{:.1}", procs::num(&p, "/latency_ms/ttft/p99")?),
                format!("{itl:.2}"),
                format!("{:.2}", procs::num(&p, "/latency_ms/itl/p99")?),
                format!("{:.0}", procs::num(&p, "/output_tokens_per_s")?),
                format!("{:.1}x", ttft / t1.max(1e-9)),
                format!("{:.1}x", itl / i1.max(1e-9)),
                format!("{:.2}%", 100.0 * procs::num(&p, "/error_rate")?),
            ]);
        }
    }
    table(
        &[
            "server",
            "streams",
            "ttft p50 ms",
            "ttft p99 ms",
            "itl p50 ms",
            "itl p99 ms",
            "tokens/s",
            "ttft vs 1",
            "itl vs 1",
            "errors",
        ],
        &rows,
    );
    println!(
        "  a real engine's step time grows with its batch (ITL rises with the streams); the \
         sim's `healthy` profile models a GPU far from its limit. See docs/sim.md."
    );
    Ok(())
}

fn llama(cpu: usize) -> anyhow::Result<Server> {
    let port = procs::free_port()?;
    let mut cmd = procs::pinned(cpu, engine::server_bin());
    engine::serve_args(&mut cmd, "127.0.0.1", &port.to_string());
    cmd.args(["--parallel", "8", "--ctx-size", "8192", "--threads", "1"]);
    let server = Server::start(cmd, format!("127.0.0.1:{port}"), "llama-server")?;
    // The port opens before the model is loaded: wait for /health.
    crate::run::wait_for_http(&format!("http://{}/health", server.addr))?;
    Ok(server)
}

fn sim(cpu: usize) -> anyhow::Result<Server> {
    let addr = format!("127.0.0.1:{}", procs::free_port()?);
    let mut cmd = procs::pinned(cpu, procs::inferscope_bin());
    cmd.args(["sim", "--profile", "healthy", "--corpus-size", "100"])
        .args(["--listen", &addr]);
    Server::start(cmd, addr, "inferscope sim")
}

/// One step of the sweep: `streams` closed-loop streams for `SECS`; the report's phase.
fn sweep_step(cpu: usize, server: &Server, streams: usize) -> anyhow::Result<serde_json::Value> {
    let out = procs::out_dir()?.join(format!("engine-{streams}.json"));
    let (target, tokens, streams, secs, prompt) = (
        format!("http://{}", server.addr),
        TOKENS.to_string(),
        streams.to_string(),
        format!("{SECS}s"),
        prompt(),
    );
    procs::stress(
        cpu,
        &[
            "--target",
            &target,
            "--prompt",
            &prompt,
            "--max-tokens",
            &tokens,
            "--body",
            r#"{"ignore_eos": true}"#,
            "--connections",
            &streams,
            "--duration",
            &secs,
        ],
        &out,
    )
    .with_context(|| format!("{streams} streams against {target}"))
}

//! `cargo xtask bench sim`: the simulator's own overhead. `inferscope sim --zero-cost` is
//! pinned to one CPU, `inferscope stress` drives streamed completions from another CPU over
//! loopback, and the streamed tokens/s is printed next to the goal (>= 20,000 on one core).
//! The sim's CPU time during the run tells whether it was the bottleneck: below 100% busy, the
//! figure is a lower bound set by the client.
use anyhow::Context as _;

use super::{
    procs::{self, Server},
    table,
};

const STREAMS: usize = 64;
const TOKENS: u32 = 500;
const SECS: u32 = 10;
const ROUNDS: usize = 2;
const GOAL: f64 = 20_000.0;

pub fn run() -> anyhow::Result<()> {
    procs::build_release()?;
    let (server_cpu, client_cpu) = procs::cpus();
    println!(
        "\n== sim overhead: zero-cost model on CPU {server_cpu}, {STREAMS} streams of {TOKENS} tokens \
         from `inferscope stress` on CPU {client_cpu}, {SECS} s x {ROUNDS} rounds (load average {})",
        procs::load_average()
    );
    let sim = Server::zero_cost_sim(server_cpu, &["--max-num-seqs", &STREAMS.to_string()])?;
    let out = procs::out_dir()?.join("sim-overhead.json");
    let mut rows = Vec::new();
    for round in 1..=ROUNDS {
        let cpu0 = procs::cpu_seconds(sim.pid())?;
        let phase = procs::stress_streams(
            client_cpu,
            &sim,
            &["--endpoint", "completions"],
            (STREAMS, TOKENS, SECS),
            &out,
        )
        .context("driving the sim with inferscope stress")?;
        let busy = (procs::cpu_seconds(sim.pid())? - cpu0) / procs::num(&phase, "/elapsed_s")?;
        let tps = procs::num(&phase, "/output_tokens_per_s")?;
        let errors = procs::num(&phase, "/error_rate")?;
        rows.push(vec![
            round.to_string(),
            format!("{tps:.0}"),
            format!("{:.0}%", 100.0 * busy),
            format!("{:.0}", tps / busy.max(1e-9)),
            format!("{:.2}%", 100.0 * errors),
            if tps >= GOAL { "yes" } else { "NO" }.to_string(),
        ]);
    }
    drop(sim);
    table(
        &[
            "round",
            "streamed tokens/s",
            "sim CPU busy",
            "tokens per sim CPU-second",
            "errors",
            ">= 20,000",
        ],
        &rows,
    );
    println!(
        "  goal: >= {GOAL:.0} streamed tokens/s on one core; sim CPU busy < 100% means the client \
         set the pace (the figure is a lower bound). Load average now {}.",
        procs::load_average()
    );
    Ok(())
}

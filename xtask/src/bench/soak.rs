//! `cargo xtask bench soak`: a long high-rate run of `inferscope stress` (records kept) against
//! `inferscope sim --zero-cost`, printing the generator's RSS over time and the bound it must
//! hold (docs/stress.md, "Memory bounds"): the records budget plus a fixed allowance for the
//! runtime, the queue and the requests in flight. `SOAK_SECS` (default 600) and `SOAK_RATE`
//! (default 1000 req/s) change the run.
use std::{
    process::Stdio,
    time::{Duration, Instant},
};

use anyhow::Context as _;

use super::{
    procs::{self, Server},
    table,
};

/// `loadgen::engine::RECORDS_BUDGET`.
const RECORDS_BUDGET_MIB: u64 = 256;
/// Runtime, binary, connection pool, the 16,384-message queue and the requests in flight.
const FIXED_MIB: u64 = 128;

fn env_u64(name: &str, default: u64) -> anyhow::Result<u64> {
    std::env::var(name).map_or(Ok(default), |v| {
        v.parse()
            .with_context(|| format!("{name}={v:?} is not a whole number"))
    })
}

pub fn run() -> anyhow::Result<()> {
    let secs = env_u64("SOAK_SECS", 600)?;
    let rate = env_u64("SOAK_RATE", 1000)?;
    procs::build_release()?;
    let (server_cpu, client_cpu) = procs::cpus();
    let bound = RECORDS_BUDGET_MIB + FIXED_MIB;
    println!(
        "\n== soak: `inferscope stress` at {rate} req/s for {secs} s (records kept) against the \
         zero-cost sim on CPU {server_cpu}, client on CPU {client_cpu}; bound {bound} MiB \
         (records budget {RECORDS_BUDGET_MIB} + fixed {FIXED_MIB}) (load average {})",
        procs::load_average()
    );
    let sim = Server::zero_cost_sim(server_cpu, &[])?;
    let out = procs::out_dir()?.join("soak.json");
    let mut stress = procs::pinned(client_cpu, procs::inferscope_bin());
    stress
        .args(["stress", "--target", &format!("http://{}", sim.addr)])
        // The sim serves this model; short answers keep the run about request count.
        .args(["--model", "inferscope-sim", "--max-tokens", "16"])
        .args([
            "--rate",
            &rate.to_string(),
            "--duration",
            &format!("{secs}s"),
        ])
        .args(["-q", "--out"])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = stress.spawn().context("starting inferscope stress")?;
    let t0 = Instant::now();
    let every = Duration::from_secs((secs / 20).max(1));
    let mut rows = Vec::new();
    let mut max = 0;
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        if let Ok(mib) = procs::rss_mib(child.id()) {
            max = max.max(mib as u64);
            rows.push(vec![
                format!("{:.0}", t0.elapsed().as_secs_f64()),
                format!("{mib:.0}"),
            ]);
        }
        std::thread::sleep(every);
    };
    drop(sim);
    table(&["t (s)", "RSS (MiB)"], &rows);
    anyhow::ensure!(
        status.success() || status.code() == Some(2),
        "inferscope stress failed ({status})"
    );
    let report = procs::read_json(&out)?;
    let finished = procs::num(&report, "/phases/0/counts/finished")?;
    let kept = report["records"].as_array().map_or(0, Vec::len);
    let overflow = report["records_overflow"].as_u64().unwrap_or(0);
    println!(
        "  {finished:.0} requests, {kept} records kept, {overflow} counted past the budget; \
         max RSS {max} MiB: {} the bound of {bound} MiB",
        if max <= bound { "within" } else { "ABOVE" }
    );
    anyhow::ensure!(max <= bound, "RSS {max} MiB is above the bound {bound} MiB");
    Ok(())
}

//! Streaming accuracy and scale of `cargo xtask bench loadgen`. `inferscope sim --profile fixed`
//! sends every token at exactly arrival + 50 ms + i x 10 ms and exports how late it actually
//! was (`inferscope_sim_*_lateness_seconds`, and the gaps it produced, `inferscope_sim_itl_seconds`,
//! exact summaries). Against a fresh sim each, `inferscope stress` keeps 1,000, 5,000 and 10,000
//! streams open (closed loop, its default ramp), then guidellm 1,000: client error = client -
//! server for TTFT p50 and ITL p99, with the server's own lateness beside it; the client's peak
//! RSS per stream and both sides' CPU; a 10,000-stream run under `--explain` for the generator's
//! own run-queue self-check; and 1,000 streams without a ramp beside the ramped ones, whose TTFT
//! p99 must stay within 2x the server's own.
mod clients;
mod measures;
mod rows;
mod self_check;
mod sim;

use anyhow::Context as _;

use super::{procs, table};
use clients::{guidellm, inferscope};
use measures::{
    BASE_STREAMS, How, ITL_MS, ITL_TARGET_MS, SATURATED, SCALES, SECS, TOKENS, TTFT_MS,
    TTFT_TARGET_MS,
};
use rows::{cost_row, fd_note, ramped_line, row};
use self_check::self_check;
use sim::measured;

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

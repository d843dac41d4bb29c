//! A fresh `fixed` sim per run, and what it did over the run from its exact summaries.

use std::{
    io::{Read as _, Write as _},
    net::TcpStream,
};

use anyhow::Context as _;

use super::measures::{Client, Measured, TTFT_MS, Truth};
use crate::bench::procs::{self, Server};

/// Starts a fresh `fixed` sim, runs `client` against it, and reads what the sim did.
pub(super) fn measured(
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
}

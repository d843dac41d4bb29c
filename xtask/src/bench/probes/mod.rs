//! `cargo xtask bench probes`: what the kernel probes cost and whether they agree with bpftrace.
//!
//! 1. Throughput of scheduler-heavy workloads (pipe ping-pong between two processes, loopback
//!    TCP request/response) bare, with `inferscope daemon` attached, and with `bpftrace`
//!    running an equivalent runqlat script; rounds interleaved, ratios printed.
//! 2. The daemon's own CPU and RSS at idle, and with verdicts on every window of a served sim
//!    under load: CPU per second, and RSS once its time line is full (3600 windows).
//! 3. Loss counters under the heaviest workload, and the scheduler event rate it produced.
//! 4. Cross-check: run-queue p50/p99 of inferscope vs bpftrace on the same workload.
mod cost;
mod cross_check;
mod overhead;
mod parse;
mod tracers;

use anyhow::bail;

use crate::run;
use cost::{idle_cost, loaded_cost};
use cross_check::cross_check;
use overhead::overhead;

pub fn run() -> anyhow::Result<()> {
    if !run::is_root() {
        bail!(
            "the probe benchmark attaches eBPF programs: run it as root (sudo cargo xtask bench probes)"
        );
    }
    super::procs::build_release()?;
    overhead()?;
    idle_cost()?;
    loaded_cost()?;
    cross_check()?;
    Ok(())
}

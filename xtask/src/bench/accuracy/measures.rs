//! What the benchmark sets and measures: the sim's fixed timings, the scales, the targets, and
//! what one run gives (the sim's truth, the client's view).

use crate::bench::procs::Usage;

pub(super) const TTFT_MS: f64 = 50.0;
pub(super) const ITL_MS: f64 = 10.0;
pub(super) const SCALES: [usize; 3] = [1000, 5000, 10_000];
/// The streams of the run whose peak RSS the others' is measured from.
pub(super) const BASE_STREAMS: usize = 10;
pub(super) const SECS: u32 = 20;
pub(super) const TOKENS: u32 = 64;
pub(super) const TTFT_TARGET_MS: f64 = 5.0;
pub(super) const ITL_TARGET_MS: f64 = 2.0;
/// A ramped run's TTFT p99 at most this times the server's own.
pub(super) const RAMPED_P99_TARGET: f64 = 2.0;
/// A process on more than this share of its CPU is the side that ran out.
pub(super) const SATURATED: f64 = 0.9;

/// What the sim itself did over a run (from its exact summaries), ms.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Truth {
    pub(super) ttft_p50: f64,
    pub(super) ttft_p99: f64,
    pub(super) itl_p99: f64,
    pub(super) late_ttft_p50: f64,
    pub(super) late_ttft_p99: f64,
    pub(super) late_itl_p99: f64,
}

/// What a client measured, ms.
#[derive(Debug, Default)]
pub(super) struct Client {
    pub(super) ttft_p50: f64,
    pub(super) ttft_p99: f64,
    pub(super) itl_p99: f64,
    pub(super) requests: f64,
    pub(super) failed: f64,
    pub(super) send_lag_p99: Option<f64>,
    /// p50 and p99 of the waits for new connections (`latency_ms.connect`).
    pub(super) connect: Option<(f64, f64)>,
    /// `ramp_up_s` and the requests it kept apart.
    pub(super) ramp: Option<(f64, f64)>,
    pub(super) usage: Option<Usage>,
}

/// One client run against a fresh sim.
pub(super) struct Measured {
    pub(super) client: Client,
    pub(super) truth: Truth,
    pub(super) server_cpu_s: f64,
}

/// How `inferscope stress` is run.
#[derive(Clone, Copy)]
pub(super) struct How {
    pub(super) streams: usize,
    pub(super) secs: u32,
    /// `ramp_up:` of the phase (`None`: the default).
    pub(super) ramp: Option<&'static str>,
    /// Under `--explain` (the self-check), writing its report beside the stress report.
    pub(super) explain: bool,
}

//! Where a phase's latency rise went. Each request with records is cut into parts (send lag,
//! client -> server, waiting for a CPU, waiting in the server's queue, working, server ->
//! client, and what no evidence covers); the decomposition of a quantile is the mean of each
//! part over the requests in a band around that quantile, the phase's band against the
//! baseline's. A request's parts add up to its latency, so the means add up to the band's mean
//! latency and the differences to the rise, by construction. Without per-request records (an
//! external generator) the parts are estimated from window medians instead, and said so.

use serde::{Deserialize, Serialize};

use super::baseline::Baseline;
use super::signals::{FIRST_TOKEN_WAKEUPS, Signal};
use super::verdict::Missing;
use crate::collect::timeline::{RequestParts, Window};
use crate::quantile::exact::{self, median};

/// Engine steps on a request's path to its first token: the step in flight when it arrives
/// (half of one on average) and the step that carries its prompt. Steps that grew longer (the
/// client's ITL p50 rose) add this many times their growth to the first token: server compute,
/// not queue, in the window-estimated decomposition.
pub const FIRST_TOKEN_STEPS: f64 = 1.5;

/// The band of ranks around the median the p50 decomposition averages over.
pub const MEDIAN_BAND: (f64, f64) = (0.4, 0.6);

/// The band of ranks the tail decomposition averages over (around p95).
pub const TAIL_BAND: (f64, f64) = (0.9, 1.0);

/// Fewest requests in each band for a per-request decomposition.
pub const MIN_BAND_REQUESTS: usize = 2;

/// The latency a decomposition splits: TTFT where the phase streams tokens, else E2E.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum LatencyMetric {
    /// Time to first token.
    #[default]
    Ttft,
    /// End to end (vector searches, plain HTTP, requests without tokens).
    E2e,
}

impl LatencyMetric {
    /// `TTFT` or `E2E`.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            LatencyMetric::Ttft => "TTFT",
            LatencyMetric::E2e => "E2E",
        }
    }
}

/// What a decomposition was computed from.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// Window medians (no per-request records): an estimate, the parts scaled to the rise.
    #[default]
    Windows,
    /// The requests of a band around the quantile, each cut into parts.
    Requests,
}

/// The requests a per-request decomposition averaged over.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Band {
    /// The quantile the band surrounds, e.g. `p50`.
    pub quantile: String,
    /// Lowest rank of the band, 0..1.
    pub from: f64,
    /// Highest rank of the band, 0..1.
    pub to: f64,
    /// Baseline requests in the band.
    pub baseline_requests: usize,
    /// Phase requests in the band.
    pub phase_requests: usize,
    /// Share of the phase band's requests the kernel saw (joined with the server's exchange).
    pub kernel_share: f64,
}

/// Where the increase of [`LatencyMetric`] over the baseline went, ms. A part is `None` when
/// no evidence measured it. The parts and `unexplained_ms` add up to `increase_ms` and none is
/// negative (a part that moved the other way is netted out of the others, in proportion, and
/// counted in `fell_ms`); a fall (`increase_ms` <= 0) is not split: every part is 0.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Decomposition {
    /// The latency split.
    pub metric: LatencyMetric,
    /// Its baseline value: the band's mean latency (per-request basis) or the windows' median
    /// p50.
    pub baseline_ms: f64,
    /// This phase's value, the same way.
    pub value_ms: f64,
    /// `value_ms - baseline_ms`.
    pub increase_ms: f64,
    /// The load generator's own send lag (latencies count from the intended start).
    pub loadgen_lag_ms: Option<f64>,
    /// Waiting inside the server for the engine (the server's queue-time metric; on the
    /// window basis without one, the kernel's server-side time nothing else accounts for).
    pub queue_ms: Option<f64>,
    /// Working inside the server: its time up to the first write less queue and CPU waiting.
    pub server_compute_ms: Option<f64>,
    /// Waiting for a CPU inside the server ([`FIRST_TOKEN_WAKEUPS`] x the threads' mean
    /// run-queue delay).
    pub cpu_scheduling_ms: Option<f64>,
    /// Transit between client and server both ways: `to_server_ms + to_client_ms` on the
    /// per-request basis.
    pub network_ms: Option<f64>,
    /// What no evidence covers.
    pub unexplained_ms: f64,
    /// Client sent -> the server read the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_server_ms: Option<f64>,
    /// The server's write -> the client read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_client_ms: Option<f64>,
    /// What the parts were computed from.
    #[serde(default)]
    pub basis: Basis,
    /// The requests averaged over (per-request basis).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub band: Option<Band>,
    /// Parts that moved against the increase, netted out of the others, ms (magnitude; the
    /// fall itself when latency fell).
    #[serde(default)]
    pub fell_ms: f64,
    /// How the parts inside the server were measured.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Parts that could not be computed, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<Missing>,
}

impl Decomposition {
    /// The named parts, in path order, with their values (absent parts left out; the
    /// per-request basis gives the two transits instead of their sum).
    #[must_use]
    pub fn parts(&self) -> Vec<(&'static str, f64)> {
        let network: [(&'static str, Option<f64>); 2] = match self.basis {
            Basis::Requests => [
                ("client -> server", self.to_server_ms),
                ("server -> client", self.to_client_ms),
            ],
            Basis::Windows => [("network", self.network_ms), ("", None)],
        };
        [("loadgen lag", self.loadgen_lag_ms), network[0]]
            .into_iter()
            .chain([
                ("cpu wait", self.cpu_scheduling_ms),
                ("queue", self.queue_ms),
                ("server compute", self.server_compute_ms),
                network[1],
            ])
            .filter_map(|(name, v)| Some((name, v?)))
            .chain(std::iter::once(("unexplained", self.unexplained_ms)))
            .collect()
    }

    /// The sum of [`Decomposition::parts`]: `increase_ms` up to rounding.
    #[must_use]
    pub fn sum_ms(&self) -> f64 {
        self.parts().iter().map(|(_, v)| v).sum()
    }
}

/// What timed a request's way through the server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Seen {
    /// Nothing: all but the send lag is unexplained.
    #[default]
    Nothing,
    /// The server's own queue and TTFT means of the request's window.
    ServerMetrics,
    /// The kernel's timestamps of the request's exchange.
    Kernel,
}

/// One request's parts, ms (indexed by the constants below; the last is what no evidence
/// covers), and what measured them.
#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    latency: f64,
    parts: [f64; PARTS],
    seen: Seen,
    /// The window had the server's queue-time metric.
    queue_metric: bool,
    /// The window had the server threads' run-queue delay.
    runq: bool,
}

const PARTS: usize = 7;
const LAG: usize = 0;
const TO_SERVER: usize = 1;
const CPU: usize = 2;
const QUEUE: usize = 3;
const COMPUTE: usize = 4;
const TO_CLIENT: usize = 5;
const UNEXPLAINED: usize = 6;

/// The server's mean queue time in `w`, ms.
fn queue_mean(w: &Window) -> Option<f64> {
    let s = w.server.as_ref()?;
    s.queue_time_mean_ms.or(s.queue_time_p50_ms)
}

/// A request's run-queue wait in `w`, ms.
fn cpu_wait(w: &Window) -> Option<f64> {
    w.runq
        .as_ref()
        .filter(|r| r.samples > 0)
        .map(|r| r.mean_us * FIRST_TOKEN_WAKEUPS / 1000.0)
}

/// Cuts request `r` of window `w` into parts of `metric`.
fn sample(r: &RequestParts, w: &Window, metric: LatencyMetric) -> Option<Sample> {
    let latency = match metric {
        LatencyMetric::Ttft => r.ttft_ms?,
        LatencyMetric::E2e => r.e2e_ms,
    };
    let mut s = Sample {
        latency,
        ..Sample::default()
    };
    s.parts[LAG] = r.send_lag_ms.min(latency);
    let mut left = latency - s.parts[LAG];
    let queue = queue_mean(w);
    s.queue_metric = queue.is_some();
    if let Some(k) = r.kernel {
        let (up, server, down) = match metric {
            LatencyMetric::Ttft => (k.to_server_ms, k.server_first_ms, k.to_client_first_ms),
            LatencyMetric::E2e => (k.to_server_ms, k.server_last_ms, k.to_client_last_ms),
        };
        s.seen = Seen::Kernel;
        s.parts[TO_SERVER] = up.min(left);
        left -= s.parts[TO_SERVER];
        s.parts[TO_CLIENT] = down.min(left);
        left -= s.parts[TO_CLIENT];
        let mut server = server.min(left);
        left -= server;
        let cpu = cpu_wait(w);
        s.runq = cpu.is_some();
        s.parts[CPU] = cpu.unwrap_or(0.0).min(server);
        server -= s.parts[CPU];
        s.parts[QUEUE] = queue.unwrap_or(0.0).min(server);
        s.parts[COMPUTE] = server - s.parts[QUEUE];
    } else if let Some(ttft) = w
        .server
        .as_ref()
        .and_then(|s| s.ttft_mean_ms)
        .filter(|_| metric == LatencyMetric::Ttft)
    {
        // No kernel view of this request: the server's own means of its window stand in.
        s.seen = Seen::ServerMetrics;
        s.parts[QUEUE] = queue.unwrap_or(0.0).min(left);
        left -= s.parts[QUEUE];
        s.parts[COMPUTE] = (ttft - s.parts[QUEUE]).max(0.0).min(left);
        left -= s.parts[COMPUTE];
    }
    s.parts[UNEXPLAINED] = left.max(0.0);
    Some(s)
}

/// The samples of windows `idx`, sorted by latency.
fn samples(idx: &[usize], windows: &[Window], metric: LatencyMetric) -> Vec<Sample> {
    let mut out: Vec<Sample> = idx
        .iter()
        .filter_map(|&i| windows.get(i))
        .flat_map(|w| w.requests.iter().filter_map(move |r| sample(r, w, metric)))
        .collect();
    out.sort_by(|a, b| a.latency.total_cmp(&b.latency));
    out
}

/// The samples ranked `band.0..band.1` of `sorted` (at least one when there are any).
fn band(sorted: &[Sample], band: (f64, f64)) -> &[Sample] {
    &sorted[exact::band(sorted.len(), band)]
}

fn mean_parts(band: &[Sample]) -> (f64, [f64; PARTS]) {
    let n = band.len().max(1) as f64;
    let mut parts = [0.0; PARTS];
    for s in band {
        for (p, v) in parts.iter_mut().zip(s.parts) {
            *p += v / n;
        }
    }
    (band.iter().map(|s| s.latency).sum::<f64>() / n, parts)
}

/// Nets the parts that moved against `rise` out of the others, in proportion, so that every
/// part is positive and they still add up to it; a rise of zero or less (a fall) is not split:
/// every part is 0. Returns what was netted out, ms (the fall itself when there is no rise).
fn settle(parts: &mut [f64], rise: f64) -> f64 {
    if rise <= 0.0 {
        parts.fill(0.0);
        return -rise;
    }
    let with: f64 = parts.iter().copied().filter(|&v| v > 0.0).sum();
    let against: f64 = parts.iter().copied().filter(|&v| v <= 0.0).sum();
    if against == 0.0 {
        return 0.0;
    }
    let scale = rise / with;
    for v in parts.iter_mut() {
        *v = if *v > 0.0 { *v * scale } else { 0.0 };
    }
    -against
}

/// The per-request decomposition of the band `band` (named `quantile`) of phase windows `idx`
/// against baseline `base`; `None` when either band has fewer than [`MIN_BAND_REQUESTS`].
#[must_use]
pub fn by_requests(
    idx: &[usize],
    windows: &[Window],
    base: &Baseline,
    quantile: &str,
    ranks: (f64, f64),
) -> Option<Decomposition> {
    let has_ttft = |ix: &[usize]| {
        ix.iter()
            .filter_map(|&i| windows.get(i))
            .flat_map(|w| &w.requests)
            .any(|r| r.ttft_ms.is_some())
    };
    let metric = if has_ttft(idx) && has_ttft(&base.windows) {
        LatencyMetric::Ttft
    } else {
        LatencyMetric::E2e
    };
    let (phase, before) = (
        samples(idx, windows, metric),
        samples(&base.windows, windows, metric),
    );
    let (phase, before) = (band(&phase, ranks), band(&before, ranks));
    if phase.len() < MIN_BAND_REQUESTS || before.len() < MIN_BAND_REQUESTS {
        return None;
    }
    let (value, now) = mean_parts(phase);
    let (baseline, then) = mean_parts(before);
    let mut delta: Vec<f64> = now.iter().zip(then).map(|(a, b)| a - b).collect();
    let increase = value - baseline;
    let fell = settle(&mut delta, increase);
    let mut d = named_parts(&delta, phase, before);
    let kernel_share =
        phase.iter().filter(|s| s.seen == Seen::Kernel).count() as f64 / phase.len() as f64;
    d.metric = metric;
    d.baseline_ms = baseline;
    d.value_ms = value;
    d.increase_ms = increase;
    d.fell_ms = fell;
    d.band = Some(Band {
        quantile: quantile.to_owned(),
        from: ranks.0,
        to: ranks.1,
        baseline_requests: before.len(),
        phase_requests: phase.len(),
        kernel_share,
    });
    Some(d)
}

/// The parts of a per-request decomposition from the differences of the bands' mean parts
/// (`delta`, settled): those no request of either band measured are `None`, with why.
fn named_parts(delta: &[f64], phase: &[Sample], before: &[Sample]) -> Decomposition {
    let any = |f: fn(&Sample) -> bool| phase.iter().chain(before).any(f);
    let kernel = any(|s| s.seen == Seen::Kernel);
    let by_metrics = any(|s| s.seen == Seen::ServerMetrics);
    let mut missing = Vec::new();
    let mut part = |i: usize, known: bool, why: Option<(&str, &str)>| {
        if let (false, Some((what, why))) = (known, why) {
            missing.push(Missing::new(what, why));
        }
        known.then_some(delta[i])
    };
    let to_server_ms = part(
        TO_SERVER,
        kernel,
        Some((
            "network",
            "no request joined with the server's exchanges (socket probes need root)",
        )),
    );
    let to_client_ms = part(TO_CLIENT, kernel, None);
    let cpu_scheduling_ms = part(
        CPU,
        kernel && any(|s| s.runq),
        Some((
            "cpu_scheduling",
            "no run-queue data (kernel probes off: needs root)",
        )),
    );
    let queue_ms = part(
        QUEUE,
        any(|s| s.queue_metric),
        Some((
            "queue",
            "no server queue-time metric: waiting and working inside the server are not split",
        )),
    );
    let server_compute_ms = part(
        COMPUTE,
        kernel || by_metrics,
        Some((
            "server_compute",
            "neither the kernel's exchange nor the server's TTFT metric times the server",
        )),
    );
    let mut notes = Vec::new();
    if kernel && queue_ms.is_some() {
        notes.push(
            "inside the server: waiting by the server's queue-time metric (its window mean), \
             the rest working"
                .to_owned(),
        );
    }
    if by_metrics {
        notes.push(
            "requests the kernel did not see: inside the server by the server's queue and TTFT \
             metrics (window means)"
                .to_owned(),
        );
    }
    Decomposition {
        loadgen_lag_ms: Some(delta[LAG]),
        queue_ms,
        server_compute_ms,
        cpu_scheduling_ms,
        network_ms: to_server_ms.zip(to_client_ms).map(|(a, b)| a + b),
        unexplained_ms: delta[UNEXPLAINED],
        to_server_ms,
        to_client_ms,
        basis: Basis::Requests,
        notes,
        missing,
        ..Decomposition::default()
    }
}

/// Splits the p50 increase over the baseline (TTFT when the phase has it, else E2E) from
/// window medians, when the windows carry no per-request records. The parts are differences
/// of medians over different populations, so they need not add up: the remainder is
/// `unexplained`, and `settle` keeps every part on the rise's side.
#[must_use]
pub fn by_windows(idx: &[usize], windows: &[Window], base: &Baseline) -> Option<Decomposition> {
    let phase_median = |s: Signal| -> Option<f64> {
        let vals: Vec<f64> = idx.iter().filter_map(|&i| s.raw(&windows[i], i)).collect();
        median(&vals)
    };
    let delta = |s: Signal| Some(phase_median(s)? - base.get(s)?);
    let (metric, latency, server_side) =
        match (phase_median(Signal::TtftP50Ms), base.get(Signal::TtftP50Ms)) {
            (Some(_), Some(_)) => (
                LatencyMetric::Ttft,
                Signal::TtftP50Ms,
                // Kernel timing of the first token is preferred; the server's own TTFT stands in.
                delta(Signal::KernelFirstTokenP50Ms).or_else(|| delta(Signal::ServerTtftP50Ms)),
            ),
            _ => (
                LatencyMetric::E2e,
                Signal::E2eP50Ms,
                delta(Signal::KernelExchangeP50Ms),
            ),
        };
    let value = phase_median(latency)?;
    let baseline = base.get(latency)?;
    let mut missing = Vec::new();
    let mut need = |v: Option<f64>, what: &str, why: &str| {
        if v.is_none() {
            missing.push(Missing::new(what, why));
        }
        v
    };
    let loadgen_lag_ms = need(
        delta(Signal::SendLagP50Ms),
        "loadgen_lag",
        "no send lag records",
    );
    let cpu_scheduling_ms = need(
        delta(Signal::RunqMeanUs).map(|us| us * FIRST_TOKEN_WAKEUPS / 1000.0),
        "cpu_scheduling",
        "no run-queue data (kernel probes off: needs root)",
    );
    // The server's queue-time metric when it exports one; else the kernel's server-side time
    // that neither CPU work per request, longer engine steps nor run-queue delay accounts for.
    let queue_ms = need(
        delta(Signal::QueueTimeP50Ms).or_else(|| {
            let work = delta(Signal::ServerCpuPerRequestMs).unwrap_or(0.0).max(0.0);
            let steps = delta(Signal::ItlP50Ms).unwrap_or(0.0).max(0.0) * FIRST_TOKEN_STEPS;
            server_side
                .map(|s| (s - work - steps - cpu_scheduling_ms.unwrap_or(0.0).max(0.0)).max(0.0))
        }),
        "queue",
        "no server queue-time metric and no kernel server-side timing",
    );
    let server_compute_ms = need(
        server_side
            .zip(queue_ms)
            .map(|(s, q)| s - q - cpu_scheduling_ms.unwrap_or(0.0)),
        "server_compute",
        "needs the server-side time (socket probes or the server's TTFT metric)",
    );
    let network_ms = need(
        delta(Signal::ClientServerGapMs),
        "network",
        "needs socket probes (root) joined with the client's requests",
    );
    let increase_ms = value - baseline;
    let mut parts = [
        loadgen_lag_ms,
        queue_ms,
        server_compute_ms,
        cpu_scheduling_ms,
        network_ms,
    ]
    .map(|v| v.unwrap_or(0.0))
    .to_vec();
    parts.push(increase_ms - parts.iter().sum::<f64>());
    let fell_ms = settle(&mut parts, increase_ms);
    let keep = |v: Option<f64>, i: usize| v.map(|_| parts[i]);
    Some(Decomposition {
        metric,
        baseline_ms: baseline,
        value_ms: value,
        increase_ms,
        loadgen_lag_ms: keep(loadgen_lag_ms, 0),
        queue_ms: keep(queue_ms, 1),
        server_compute_ms: keep(server_compute_ms, 2),
        cpu_scheduling_ms: keep(cpu_scheduling_ms, 3),
        network_ms: keep(network_ms, 4),
        unexplained_ms: parts[5],
        fell_ms,
        notes: vec!["estimated from window medians: no per-request records".to_owned()],
        missing,
        ..Decomposition::default()
    })
}

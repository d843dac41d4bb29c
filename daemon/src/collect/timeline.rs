//! The one time line: every signal folded into fixed windows (default 1 s). Each source
//! (load generator, server metrics, run-queue, sockets, GPU) fills its own part of a window;
//! `attribute` reads whole windows. Absent sources stay `None`: "no evidence", not zero.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::measure::{Endpoint, ErrorClass};
use crate::scrape::ServerKind;

pub use crate::quantile::Quantiles;

/// What the load generator saw in the window (requests that started in it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LoadSignals {
    /// Requests that started.
    pub requests: u64,
    /// Of those, failed.
    pub errors: u64,
    /// Intended arrival rate, if open-loop.
    pub target_rps: Option<f64>,
    /// Achieved rate.
    pub achieved_rps: f64,
    /// Most requests in flight at once.
    pub in_flight_max: u64,
    /// Time to first token, ms (from the intended start).
    pub ttft_ms: Option<Quantiles>,
    /// Inter-token latency, ms.
    pub itl_ms: Option<Quantiles>,
    /// End-to-end latency, ms.
    pub e2e_ms: Option<Quantiles>,
    /// The generator's own lag: actual - intended send time, ms.
    pub send_lag_ms: Option<Quantiles>,
    /// Output tokens per second.
    pub output_tokens_per_s: f64,
    /// The kind of most of the window's requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<Endpoint>,
    /// Failed requests by class.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub error_classes: BTreeMap<ErrorClass, u64>,
    /// Mean recall@k of the window's vector searches sampled for ground truth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recall_mean: Option<f64>,
    /// Scenario events (`events:` requests, e.g. an index rebuild) of the window's phase sent
    /// before the window ended.
    #[serde(default)]
    pub phase_events_before: u64,
    /// Of the window's LLM requests, the share sent within one prefill of an identical request
    /// (same body): prefills computed twice, which no prefix cache can share (see
    /// `load::duplicate_prefills`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duplicate_prefill_share: Option<f64>,
    /// The share of them the workload's own sampling gives a twin within one prefill by
    /// chance (`load::Duplicates::chance`): a stampede is the share beyond it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duplicate_prefill_chance: Option<f64>,
    /// Arrivals the schedule asked for in this window that were never sent (`load::spread_unsent`:
    /// the generator fell behind past its phase's end, or was stopped). `None` where every
    /// arrival was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsent: Option<u64>,
}

/// The inference server's own metrics, mapped from vLLM / `SGLang` / TGI / llama.cpp names.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ServerSignals {
    /// The server the scrape recognised by its metric names: what advice speaks of
    /// (`attribute::advice`).
    #[serde(default, skip_serializing_if = "ServerKind::is_unknown")]
    pub engine: ServerKind,
    /// Requests running (in the batch).
    pub running: Option<f64>,
    /// Requests waiting (queued).
    pub waiting: Option<f64>,
    /// The server's cap on running requests (vLLM `max_num_seqs`, TGI max batch size), when
    /// known: KV pressure shows as running plateauing *below* it.
    pub max_running: Option<f64>,
    /// KV-cache usage, 0..1.
    pub kv_usage: Option<f64>,
    /// Preemptions (`SGLang`: retractions) per second.
    pub preemptions_per_s: Option<f64>,
    /// Prefix-cache hit rate, 0..1.
    pub prefix_hit_rate: Option<f64>,
    /// Prompt tokens the server looked up in its prefix cache in the window (vLLM), the hit
    /// rate's denominator: a phase's hit rate weighs its windows by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_queries: Option<f64>,
    /// Queue time p50 in the window, ms (the TTFT decomposition adds medians).
    pub queue_time_p50_ms: Option<f64>,
    /// Queue time p95 in the window, ms.
    pub queue_time_p95_ms: Option<f64>,
    /// Mean queue time in the window, ms (exact: histogram sum / count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_time_mean_ms: Option<f64>,
    /// Server-reported TTFT p50 in the window, ms (server-side first token without probes).
    pub ttft_p50_ms: Option<f64>,
    /// Server-reported TTFT p95 in the window, ms.
    pub ttft_p95_ms: Option<f64>,
    /// Server-reported mean TTFT in the window, ms (exact: histogram sum / count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_mean_ms: Option<f64>,
    /// Prompt tokens per second (rises faster than requests under recompute).
    pub prompt_tokens_per_s: Option<f64>,
    /// Mean sequences per engine step (llama.cpp: busy slots per decode over the window;
    /// others: running requests at the window's last scrape).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_mean: Option<f64>,
    /// The server's mean time per output token of one sequence, ms (vLLM/SGLang inter-token
    /// histogram mean; llama.cpp generation seconds over tokens generated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpot_mean_ms: Option<f64>,
    /// Vector searches answered per second (a vector service's own counter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vector_searches_per_s: Option<f64>,
    /// Index rebuild activity in the window: scrapes that found a rebuild running plus
    /// rebuilds completed; 0 when the service reports its index idle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index_rebuild: Option<f64>,
}

/// Run-queue delay of the watched server's threads (and of the load generator's).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunqSignals {
    /// Samples of the server.
    pub samples: u64,
    /// Server p50, µs.
    pub p50_us: f64,
    /// Server p99, µs.
    pub p99_us: f64,
    /// Server mean, µs.
    pub mean_us: f64,
    /// Server total run-queue wait in the window, ms (all threads).
    pub total_ms: f64,
    /// The part of `total_ms` behind the server's own threads (a thread of the same process
    /// handed it the CPU): its work crowding its CPUs, not others taking them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub own_ms: Option<f64>,
    /// Load generator p99, µs, when it is watched too.
    pub loadgen_p99_us: Option<f64>,
    /// Load generator total run-queue wait in the window, ms.
    pub loadgen_total_ms: Option<f64>,
    /// The server processes' on-CPU time in the window, ms (all threads, procfs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oncpu_ms: Option<f64>,
    /// The on-CPU time of the server's busiest thread in the window, ms (procfs): an engine's
    /// scheduler thread near a whole window is a loop the host bounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busiest_thread_ms: Option<f64>,
}

/// The exchanges one watched server (a gateway) asked another for in a window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CalledBy {
    /// The calling process.
    pub tgid: u32,
    /// Its exchanges.
    pub exchanges: u64,
    /// Their server-side first token p50, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_token_p50_ms: Option<f64>,
}

/// TCP signals of the watched server's connections.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NetSignals {
    /// Connections established (either side).
    pub connects: u64,
    /// Connect latency p99, ms.
    pub connect_p99_ms: Option<f64>,
    /// The server's connections that closed (either side closing).
    #[serde(default)]
    pub closes: u64,
    /// Lifetime (connect or accept to close) p50 of the connections that closed, ms: about one
    /// exchange when the server closes after every answer, so each request pays a handshake.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifetime_p50_ms: Option<f64>,
    /// Mean smoothed RTT over the window's samples, µs.
    pub srtt_mean_us: Option<f64>,
    /// Largest smoothed RTT, µs.
    pub srtt_max_us: Option<f64>,
    /// Retransmitted segments.
    pub retrans: u64,
    /// Request/response exchanges the server completed.
    pub exchanges: u64,
    /// Server-side first byte (request in -> first write) p50, ms.
    pub server_ttfb_p50_ms: Option<f64>,
    /// Server-side first token p50, ms: request in -> second write (the first token after the
    /// headers of a streamed response), or -> first write when the response came in one.
    pub server_first_token_p50_ms: Option<f64>,
    /// Server-side first token p95, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_first_token_p95_ms: Option<f64>,
    /// Whole exchange (request in -> last write) p50, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exchange_p50_ms: Option<f64>,
    /// Whole exchange p99, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exchange_p99_ms: Option<f64>,
    /// Exchanges another watched server asked for (a hop of a chain: a gateway's call).
    #[serde(default)]
    pub called_exchanges: u64,
    /// Server-side first token p50 of those exchanges, ms: the hop's time as its caller
    /// waits for it, apart from other clients (scrapes, health checks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub called_first_token_p50_ms: Option<f64>,
    /// The same by the calling server's process, so that a node with several gateways knows
    /// which one waited (the daemon's hops).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub callers: Vec<CalledBy>,
    /// Exchanges during which the server's connection retransmitted.
    #[serde(default)]
    pub retrans_exchanges: u64,
    /// Client sent -> the server read the request, p50 over the window's joined requests, ms:
    /// transit plus time the request waited unread (listen backlog, a socket no worker reads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_delay_p50_ms: Option<f64>,
    /// The window's joined requests loss hit: their connection retransmitted while they were in
    /// flight, or their answer's last bytes stalled in transit (`collect/load/joins.rs`,
    /// `stalled`).
    #[serde(default)]
    pub loss_hit_requests: u64,
    /// The window's requests joined with an exchange (hit by loss or not).
    #[serde(default)]
    pub joined_requests: u64,
    /// The slowest E2E of the requests loss hit, ms (loss shows in the tail of the few
    /// requests it hits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_hit_e2e_max_ms: Option<f64>,
    /// E2E p50 of the other joined requests, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_clean_e2e_p50_ms: Option<f64>,
    /// Network transit before the first token of the window's requests (joined with the
    /// exchanges by connection: sent -> server read plus server wrote -> client read) p50, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transit_p50_ms: Option<f64>,
}

/// GPU signals: driver API calls (uprobes) and NVML.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GpuSignals {
    /// Successful allocation calls.
    pub allocs: u64,
    /// Free calls.
    pub frees: u64,
    /// Allocation calls that returned out-of-memory.
    pub oom: u64,
    /// Device bytes the server holds (allocated and not freed).
    pub live_bytes: u64,
    /// Host time blocked in synchronisation, ms (summed over threads).
    pub sync_ms: f64,
    /// Kernel and graph launches.
    pub launches: u64,
    /// Bytes copied host -> device by async copies (`cuMemcpyHtoDAsync`): with the copies the
    /// other way, the evidence of KV offloading and swapping.
    #[serde(default, skip_serializing_if = "crate::measure::report::is_zero")]
    pub h2d_bytes: u64,
    /// Bytes copied device -> host by async copies (`cuMemcpyDtoHAsync`).
    #[serde(default, skip_serializing_if = "crate::measure::report::is_zero")]
    pub d2h_bytes: u64,
    /// Physical memory the server mapped into virtual reservations (`cuMemMap`) and holds at
    /// the window's close, bytes: device memory that `live_bytes` (allocations) does not see.
    #[serde(default, skip_serializing_if = "crate::measure::report::is_zero")]
    pub mapped_bytes: u64,
    /// NVML memory used / total, when a driver is present.
    pub mem_used_frac: Option<f64>,
    /// XID errors the kernel's `nvidia:nvidia_dev_xid` tracepoint counted.
    pub xids: u64,
    /// Each GPU the server uses, as NVML sampled it over the window.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<GpuDevice>,
    /// XID errors in the window, one event each, from the kernel's tracepoint or NVML's
    /// critical-XID events.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub xid_events: Vec<XidEvent>,
}

/// One GPU over one window, from NVML's samples in it: gauges as their last value, rates and
/// utilisations as their mean over the samples.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GpuDevice {
    /// NVML device index.
    pub index: u32,
    /// `GPU-...` UUID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// NVML samples of the device in the window.
    pub samples: u32,
    /// Framebuffer memory in use, bytes (last sample).
    pub memory_used_bytes: Option<u64>,
    /// Framebuffer memory the driver reserves, bytes (last sample).
    pub memory_reserved_bytes: Option<u64>,
    /// Framebuffer memory installed, bytes.
    pub memory_total_bytes: Option<u64>,
    /// Share of time a kernel ran on the SMs, percent (NVML's GPU utilisation), mean.
    pub sm_util_percent: Option<f64>,
    /// Share of time device memory was read or written, percent, mean.
    pub mem_bw_util_percent: Option<f64>,
    /// Power draw, W, mean.
    pub power_w: Option<f64>,
    /// Power limit the driver enforces, W (last sample).
    pub power_limit_w: Option<f64>,
    /// Energy the device used in the window, J: NVML's energy counter at the window's newest
    /// sample less the previous window's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_j: Option<f64>,
    /// SM clock, MHz, mean.
    pub sm_clock_mhz: Option<f64>,
    /// Every clock event (throttle) reason seen in the window.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub throttle_reasons: Vec<crate::gpu::nvml::ClockEventReason>,
    /// Share of the samples with a power or thermal slowdown active, 0..1.
    pub throttle_share: Option<f64>,
    /// `PCIe` transmit (device to host), bytes/s, mean.
    pub pcie_tx_bytes_per_s: Option<f64>,
    /// `PCIe` receive (host to device), bytes/s, mean.
    pub pcie_rx_bytes_per_s: Option<f64>,
    /// The processes on the GPU (last sample).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<GpuProcessUse>,
}

/// A process on a GPU and the memory it holds.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct GpuProcessUse {
    /// Host PID.
    pub pid: u32,
    /// Bytes used, when NVML can tell.
    pub used_bytes: Option<u64>,
}

/// Who reported an XID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum XidSource {
    /// The kernel's `nvidia:nvidia_dev_xid` tracepoint.
    Kernel,
    /// NVML's critical-XID event.
    Nvml,
}

/// One XID error on the time line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct XidEvent {
    /// When it was seen, Unix ms.
    pub unix_ms: u64,
    /// The XID (e.g. 79: the GPU fell off the bus, 48: a double-bit ECC error), when known.
    pub code: Option<u64>,
    /// The GPU's NVML index, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u32>,
    /// Who reported it.
    pub source: XidSource,
}

/// One server's share of a closing window: its processes and the window to fill.
pub struct Part<'a> {
    /// The server's processes (host pids).
    pub pids: &'a [u32],
    /// Its window.
    pub window: &'a mut Window,
}

/// One request's latency cut where the kernel saw it, ms (µs resolution), for the
/// decomposition of a phase's latency rise (`attribute::decompose`). The parts of each
/// latency add up to it exactly: what no evidence covers is the remainder.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RequestParts {
    /// Time to first token from the intended start, when the request has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<f64>,
    /// End to end from the intended start.
    pub e2e_ms: f64,
    /// The load generator's send lag (intended -> actual send).
    pub send_lag_ms: f64,
    /// What the kernel saw of it, when it was joined with the server's exchange.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<KernelParts>,
}

/// A request's path as the kernel timed it, ms, each part clamped into the client's own
/// interval so that the parts tile it: sent -> server read -> server wrote -> client read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct KernelParts {
    /// Client sent -> the server read the request (transit and unread time).
    pub to_server_ms: f64,
    /// The server read the request -> it wrote the first token.
    pub server_first_ms: f64,
    /// The server wrote the first token -> the client read it.
    pub to_client_first_ms: f64,
    /// The server read the request -> its last write.
    pub server_last_ms: f64,
    /// The server's last write -> the client read the end of the response.
    pub to_client_last_ms: f64,
}

/// Everything known about one window of the watched target.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Window {
    /// Window start, Unix ms.
    pub start_unix_ms: u64,
    /// Window length, ms.
    pub len_ms: u64,
    /// Phase of the run (load generator's or an external mark), if any.
    pub phase: Option<String>,
    /// Load generator.
    pub load: Option<LoadSignals>,
    /// Server metrics.
    pub server: Option<ServerSignals>,
    /// Scheduler.
    pub runq: Option<RunqSignals>,
    /// Network.
    pub net: Option<NetSignals>,
    /// GPU.
    pub gpu: Option<GpuSignals>,
    /// The requests that started in the window, each cut into parts (records of the embedded
    /// load generator only: external generators' requests are not seen one by one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<RequestParts>,
}

/// Something done to the target during the run (a scenario's `events:` request, such as an
/// index rebuild), marked on the time line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Mark {
    /// When it was sent, Unix ms.
    pub unix_ms: u64,
    /// Phase it belongs to.
    pub phase: Option<String>,
    /// What it was, e.g. `POST /v1/vector/rebuild -> 200`.
    pub what: String,
}

/// Fixed-length windows from an origin, grown on demand.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Timeline {
    /// Start of window 0, Unix ms.
    pub origin_unix_ms: u64,
    /// Window length, ms.
    pub len_ms: u64,
    /// The windows, oldest first.
    pub windows: Vec<Window>,
    /// Scenario events, in time order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub marks: Vec<Mark>,
}

impl Timeline {
    /// An empty time line starting at `origin_unix_ms`.
    #[must_use]
    pub fn new(origin_unix_ms: u64, len_ms: u64) -> Self {
        Self {
            origin_unix_ms,
            len_ms: len_ms.max(1),
            windows: Vec::new(),
            marks: Vec::new(),
        }
    }

    /// Index of the window holding `unix_ms` (times before the origin land in window 0).
    #[must_use]
    pub fn index(&self, unix_ms: u64) -> usize {
        (unix_ms.saturating_sub(self.origin_unix_ms) / self.len_ms) as usize
    }

    /// The window holding `unix_ms`, created (with any before it) if needed.
    pub fn at(&mut self, unix_ms: u64) -> &mut Window {
        let i = self.index(unix_ms);
        while self.windows.len() <= i {
            let n = self.windows.len() as u64;
            self.windows.push(Window {
                start_unix_ms: self.origin_unix_ms + n * self.len_ms,
                len_ms: self.len_ms,
                ..Window::default()
            });
        }
        &mut self.windows[i]
    }

    /// Moves the origin forward to `origin_unix_ms` (by less than a window), and every window
    /// with it: the collectors start a few ms before the load they window, and the windows are
    /// closed in step with the load.
    pub fn realign(&mut self, origin_unix_ms: u64) {
        let d = origin_unix_ms.saturating_sub(self.origin_unix_ms);
        if d < self.len_ms {
            self.origin_unix_ms += d;
            for w in &mut self.windows {
                w.start_unix_ms += d;
            }
        }
    }

    /// Drops windows older than the newest `keep`, so a long-running daemon stays bounded.
    pub fn retain_last(&mut self, keep: usize) {
        if self.windows.len() > keep {
            let cut = self.windows.len() - keep;
            self.windows.drain(..cut);
            self.origin_unix_ms += cut as u64 * self.len_ms;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_created_in_order_and_bounded() {
        let mut t = Timeline::new(10_000, 1000);
        t.at(12_500).runq = Some(RunqSignals {
            samples: 3,
            ..RunqSignals::default()
        });
        assert_eq!(t.windows.len(), 3);
        assert_eq!(t.windows[2].start_unix_ms, 12_000);
        assert_eq!(t.index(9_000), 0);
        t.retain_last(1);
        assert_eq!(t.origin_unix_ms, 12_000);
        assert_eq!(t.windows[0].runq.as_ref().unwrap().samples, 3);
        assert_eq!(t.at(12_999).start_unix_ms, 12_000);
    }

    #[test]
    fn realign_moves_every_window_by_less_than_one() {
        let mut t = Timeline::new(10_000, 1000);
        t.at(11_500);
        t.realign(10_003);
        assert_eq!(t.origin_unix_ms, 10_003);
        let starts: Vec<u64> = t.windows.iter().map(|w| w.start_unix_ms).collect();
        assert_eq!(starts, [10_003, 11_003]);
        // A request the load (started at 10_003) sent 1.999 s in belongs to its second
        // window; before, it fell in the third.
        assert_eq!(t.index(12_002), 1);
        t.realign(20_000);
        assert_eq!(
            t.origin_unix_ms, 10_003,
            "a whole window or more is not a realignment"
        );
    }
}

//! The catalogue of time-line signals that every exporter publishes: one entry per field of
//! [`Window`], with its OpenTelemetry name, Prometheus name, unit and description. OTLP and the
//! Prometheus endpoint both walk this table, so they cannot drift apart.
//!
//! Durations are converted to seconds and ratios stay in 0..1, as OpenTelemetry semantic
//! conventions and Prometheus naming both ask. Window-level distributions are published as
//! gauges with a bounded `stat` label (`p50`, `p95`, `p99`, `max`): the windows hold quantiles,
//! not raw samples, and Prometheus reserves the `quantile` label for summaries. Per-request
//! histograms under the semantic-convention names (`http.client.request.duration`, `gen_ai.*`)
//! come from sampled requests instead; see `otlp`.

use std::collections::BTreeMap;

use crate::collect::{
    identity::ServerIdentity,
    timeline::{GpuDevice, Quantiles, Window},
};

/// How a signal accumulates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Counted per window; exporters publish the running total (monotonic).
    Counter,
    /// A level or a distribution statistic of the latest window.
    Gauge,
}

/// One value of a signal in one window; `stat` is set for distribution statistics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// The `stat` label (`p50`, `p95`, `p99`, `max`), if the signal is a distribution.
    pub stat: Option<&'static str>,
    /// The `gpu` label (NVML device index), if the signal is one GPU's.
    pub gpu: Option<u32>,
    /// Value in the signal's unit.
    pub value: f64,
}

/// One time-line signal.
#[derive(Debug, Clone, Copy)]
pub struct Signal {
    /// OpenTelemetry instrument name.
    pub name: &'static str,
    /// Prometheus metric name, without the `_total` that counters get.
    pub prom: &'static str,
    /// UCUM unit, as OpenTelemetry writes it (`s`, `By`, `1`, `{request}`).
    pub unit: &'static str,
    /// Counter or gauge.
    pub kind: Kind,
    /// One-line description (HELP text).
    pub description: &'static str,
    read: fn(&Window, &mut Vec<Point>),
}

impl Signal {
    /// The signal's values in `window`; empty when its source had no evidence there.
    #[must_use]
    pub fn points(&self, window: &Window) -> Vec<Point> {
        let mut out = Vec::new();
        (self.read)(window, &mut out);
        out
    }
}

const MS: f64 = 1e-3;
const US: f64 = 1e-6;

/// Pushes a plain value, if the source had evidence.
fn one(out: &mut Vec<Point>, value: Option<f64>) {
    if let Some(value) = value {
        out.push(Point {
            stat: None,
            gpu: None,
            value,
        });
    }
}

/// Pushes one statistic of a distribution, converted by `scale`.
fn stat(out: &mut Vec<Point>, stat: &'static str, value: Option<f64>, scale: f64) {
    if let Some(v) = value {
        out.push(Point {
            stat: Some(stat),
            gpu: None,
            value: v * scale,
        });
    }
}

/// Pushes p50/p95/p99/max, converted by `scale`.
fn quantiles(out: &mut Vec<Point>, q: Option<&Quantiles>, scale: f64) {
    if let Some(q) = q {
        for (name, v) in [
            ("p50", q.p50),
            ("p95", q.p95),
            ("p99", q.p99),
            ("max", q.max),
        ] {
            stat(out, name, Some(v), scale);
        }
    }
}

/// Pushes one value per GPU of the window (`gpu` label), converted by `scale`.
fn per_gpu(out: &mut Vec<Point>, w: &Window, read: fn(&GpuDevice) -> Option<f64>, scale: f64) {
    for d in w.gpu.iter().flat_map(|g| &g.devices) {
        if let Some(v) = read(d) {
            out.push(Point {
                stat: None,
                gpu: Some(d.index),
                value: v * scale,
            });
        }
    }
}

macro_rules! signal {
    ($name:literal, $prom:literal, $unit:literal, $kind:ident, $desc:literal, $read:expr) => {
        Signal {
            name: $name,
            prom: $prom,
            unit: $unit,
            kind: Kind::$kind,
            description: $desc,
            read: $read,
        }
    };
}

/// Every signal of a [`Window`], grouped by source (load, server, run queue, network, GPU).
// One row per signal reads as a table; rustfmt would spread each over eight lines.
#[rustfmt::skip]
pub static SIGNALS: &[Signal] = &[
    // Load generator.
    signal!("inferscope.load.requests", "inferscope_load_requests", "{request}", Counter,
        "Requests the load generator started.",
        |w, o| one(o, w.load.as_ref().map(|l| l.requests as f64))),
    signal!("inferscope.load.errors", "inferscope_load_errors", "{request}", Counter,
        "Requests the load generator started that failed.",
        |w, o| one(o, w.load.as_ref().map(|l| l.errors as f64))),
    signal!("inferscope.load.target_rate", "inferscope_load_target_requests_per_second", "{request}/s", Gauge,
        "Intended open-loop arrival rate.",
        |w, o| one(o, w.load.as_ref().and_then(|l| l.target_rps))),
    signal!("inferscope.load.achieved_rate", "inferscope_load_achieved_requests_per_second", "{request}/s", Gauge,
        "Achieved request rate in the window.",
        |w, o| one(o, w.load.as_ref().map(|l| l.achieved_rps))),
    signal!("inferscope.load.in_flight_max", "inferscope_load_in_flight_max_requests", "{request}", Gauge,
        "Most requests in flight at once in the window.",
        |w, o| one(o, w.load.as_ref().map(|l| l.in_flight_max as f64))),
    signal!("inferscope.load.time_to_first_token", "inferscope_load_time_to_first_token_seconds", "s", Gauge,
        "Client-side time to first token, from the intended start.",
        |w, o| quantiles(o, w.load.as_ref().and_then(|l| l.ttft_ms.as_ref()), MS)),
    signal!("inferscope.load.inter_token_latency", "inferscope_load_inter_token_latency_seconds", "s", Gauge,
        "Client-side inter-token latency.",
        |w, o| quantiles(o, w.load.as_ref().and_then(|l| l.itl_ms.as_ref()), MS)),
    signal!("inferscope.load.request.duration", "inferscope_load_request_duration_seconds", "s", Gauge,
        "Client-side end-to-end request latency.",
        |w, o| quantiles(o, w.load.as_ref().and_then(|l| l.e2e_ms.as_ref()), MS)),
    signal!("inferscope.load.send_lag", "inferscope_load_send_lag_seconds", "s", Gauge,
        "The load generator's own lag (actual minus intended send time).",
        |w, o| quantiles(o, w.load.as_ref().and_then(|l| l.send_lag_ms.as_ref()), MS)),
    signal!("inferscope.load.output_token_rate", "inferscope_load_output_tokens_per_second", "{token}/s", Gauge,
        "Output tokens received per second.",
        |w, o| one(o, w.load.as_ref().map(|l| l.output_tokens_per_s))),
    // The inference server's own metrics.
    signal!("inferscope.server.requests.running", "inferscope_server_running_requests", "{request}", Gauge,
        "Requests the server is running (in the batch).",
        |w, o| one(o, w.server.as_ref().and_then(|s| s.running))),
    signal!("inferscope.server.requests.waiting", "inferscope_server_waiting_requests", "{request}", Gauge,
        "Requests queued at the server.",
        |w, o| one(o, w.server.as_ref().and_then(|s| s.waiting))),
    signal!("inferscope.server.kv_cache.usage", "inferscope_server_kv_cache_usage_ratio", "1", Gauge,
        "KV-cache usage, 0 to 1.",
        |w, o| one(o, w.server.as_ref().and_then(|s| s.kv_usage))),
    signal!("inferscope.server.preemption_rate", "inferscope_server_preemptions_per_second", "{preemption}/s", Gauge,
        "Preemptions (SGLang: retractions) per second.",
        |w, o| one(o, w.server.as_ref().and_then(|s| s.preemptions_per_s))),
    signal!("inferscope.server.prefix_cache.hit_ratio", "inferscope_server_prefix_cache_hit_ratio", "1", Gauge,
        "Prefix-cache hit rate, 0 to 1.",
        |w, o| one(o, w.server.as_ref().and_then(|s| s.prefix_hit_rate))),
    signal!("inferscope.server.queue_time", "inferscope_server_queue_time_seconds", "s", Gauge,
        "Server-reported request queue time.",
        |w, o| stat(o, "p95", w.server.as_ref().and_then(|s| s.queue_time_p95_ms), MS)),
    signal!("inferscope.server.time_to_first_token", "inferscope_server_time_to_first_token_seconds", "s", Gauge,
        "Server-reported time to first token.",
        |w, o| stat(o, "p95", w.server.as_ref().and_then(|s| s.ttft_p95_ms), MS)),
    signal!("inferscope.server.prompt_token_rate", "inferscope_server_prompt_tokens_per_second", "{token}/s", Gauge,
        "Prompt tokens the server processed per second.",
        |w, o| one(o, w.server.as_ref().and_then(|s| s.prompt_tokens_per_s))),
    // Scheduler run-queue delay.
    signal!("inferscope.runq.samples", "inferscope_runq_samples", "{sample}", Counter,
        "Run-queue delay samples of the server's threads.",
        |w, o| one(o, w.runq.as_ref().map(|r| r.samples as f64))),
    signal!("inferscope.runq.delay", "inferscope_runq_delay_seconds", "s", Gauge,
        "Run-queue delay of the server's threads.",
        |w, o| { stat(o, "p50", w.runq.as_ref().map(|r| r.p50_us), US); stat(o, "p99", w.runq.as_ref().map(|r| r.p99_us), US); }),
    signal!("inferscope.runq.delay.mean", "inferscope_runq_delay_mean_seconds", "s", Gauge,
        "Mean run-queue delay of the server's threads.",
        |w, o| one(o, w.runq.as_ref().map(|r| r.mean_us * US))),
    signal!("inferscope.cpu.busiest_thread", "inferscope_cpu_busiest_thread_seconds", "s", Counter,
        "On-CPU time of the server's busiest thread (procfs): near one second per second, an engine loop the host bounds.",
        |w, o| one(o, w.runq.as_ref().and_then(|r| r.busiest_thread_ms).map(|ms| ms * MS))),
    signal!("inferscope.runq.wait_time", "inferscope_runq_wait_seconds", "s", Counter,
        "Time the server's threads spent runnable but waiting for a CPU.",
        |w, o| one(o, w.runq.as_ref().map(|r| r.total_ms * MS))),
    signal!("inferscope.loadgen.runq.delay", "inferscope_loadgen_runq_delay_seconds", "s", Gauge,
        "Run-queue delay of the load generator's threads.",
        |w, o| stat(o, "p99", w.runq.as_ref().and_then(|r| r.loadgen_p99_us), US)),
    signal!("inferscope.loadgen.runq.wait_time", "inferscope_loadgen_runq_wait_seconds", "s", Counter,
        "Time the load generator's threads spent runnable but waiting for a CPU.",
        |w, o| one(o, w.runq.as_ref().and_then(|r| r.loadgen_total_ms).map(|v| v * MS))),
    // Network.
    signal!("inferscope.net.connections", "inferscope_net_connections", "{connection}", Counter,
        "TCP connections of the server established.",
        |w, o| one(o, w.net.as_ref().map(|n| n.connects as f64))),
    signal!("inferscope.net.connect.duration", "inferscope_net_connect_duration_seconds", "s", Gauge,
        "TCP connect latency.",
        |w, o| stat(o, "p99", w.net.as_ref().and_then(|n| n.connect_p99_ms), MS)),
    signal!("inferscope.net.connections.closed", "inferscope_net_connections_closed", "{connection}", Counter,
        "TCP connections of the server closed.",
        |w, o| one(o, w.net.as_ref().map(|n| n.closes as f64))),
    signal!("inferscope.net.connection.lifetime", "inferscope_net_connection_lifetime_seconds", "s", Gauge,
        "Lifetime of the server's TCP connections that closed.",
        |w, o| stat(o, "p50", w.net.as_ref().and_then(|n| n.lifetime_p50_ms), MS)),
    signal!("inferscope.net.srtt.mean", "inferscope_net_srtt_mean_seconds", "s", Gauge,
        "Mean smoothed round-trip time of the server's connections.",
        |w, o| one(o, w.net.as_ref().and_then(|n| n.srtt_mean_us).map(|v| v * US))),
    signal!("inferscope.net.srtt.max", "inferscope_net_srtt_max_seconds", "s", Gauge,
        "Largest smoothed round-trip time of the server's connections.",
        |w, o| one(o, w.net.as_ref().and_then(|n| n.srtt_max_us).map(|v| v * US))),
    signal!("inferscope.net.retransmits", "inferscope_net_retransmits", "{segment}", Counter,
        "TCP segments retransmitted on the server's connections.",
        |w, o| one(o, w.net.as_ref().map(|n| n.retrans as f64))),
    signal!("inferscope.net.exchanges", "inferscope_net_exchanges", "{exchange}", Counter,
        "Request/response exchanges the server completed.",
        |w, o| one(o, w.net.as_ref().map(|n| n.exchanges as f64))),
    signal!("inferscope.net.server.first_byte", "inferscope_net_server_first_byte_seconds", "s", Gauge,
        "Server-side time from request in to first byte out.",
        |w, o| stat(o, "p50", w.net.as_ref().and_then(|n| n.server_ttfb_p50_ms), MS)),
    signal!("inferscope.net.server.first_token", "inferscope_net_server_first_token_seconds", "s", Gauge,
        "Server-side time from request in to first token out (second write).",
        |w, o| stat(o, "p50", w.net.as_ref().and_then(|n| n.server_first_token_p50_ms), MS)),
    // A hop of a chain: the exchanges another watched server (a gateway) asked this one for.
    signal!("inferscope.hop.calls", "inferscope_hop_calls", "{exchange}", Counter,
        "Exchanges the server answered on connections another watched server opened (a hop of a chain).",
        |w, o| one(o, w.net.as_ref().map(|n| n.called_exchanges as f64))),
    signal!("inferscope.hop.first_token", "inferscope_hop_first_token_seconds", "s", Gauge,
        "Server-side time from request in to first token out of the hop's calls: the time its callers wait for it.",
        |w, o| stat(o, "p50", w.net.as_ref().and_then(|n| n.called_first_token_p50_ms), MS)),
    // GPU.
    signal!("inferscope.gpu.allocations", "inferscope_gpu_allocations", "{call}", Counter,
        "Successful CUDA device-memory allocation calls.",
        |w, o| one(o, w.gpu.as_ref().map(|g| g.allocs as f64))),
    signal!("inferscope.gpu.frees", "inferscope_gpu_frees", "{call}", Counter,
        "CUDA device-memory free calls.",
        |w, o| one(o, w.gpu.as_ref().map(|g| g.frees as f64))),
    signal!("inferscope.gpu.allocation_failures", "inferscope_gpu_allocation_oom", "{call}", Counter,
        "CUDA allocation calls that returned out-of-memory.",
        |w, o| one(o, w.gpu.as_ref().map(|g| g.oom as f64))),
    signal!("inferscope.gpu.memory.live", "inferscope_gpu_memory_live_bytes", "By", Gauge,
        "Device memory the server holds (allocated and not freed).",
        |w, o| one(o, w.gpu.as_ref().map(|g| g.live_bytes as f64))),
    signal!("inferscope.gpu.memory.mapped", "inferscope_gpu_memory_mapped_bytes", "By", Gauge,
        "Physical device memory the server mapped into virtual reservations (cuMemMap: expandable segments, sleep mode) and holds.",
        |w, o| one(o, w.gpu.as_ref().map(|g| g.mapped_bytes as f64))),
    signal!("inferscope.gpu.copy.host_to_device", "inferscope_gpu_copy_host_to_device_bytes", "By", Counter,
        "Bytes copied host to device by async copies (KV offloading and swapping read back).",
        |w, o| one(o, w.gpu.as_ref().map(|g| g.h2d_bytes as f64))),
    signal!("inferscope.gpu.copy.device_to_host", "inferscope_gpu_copy_device_to_host_bytes", "By", Counter,
        "Bytes copied device to host by async copies (KV offloading and swapping out).",
        |w, o| one(o, w.gpu.as_ref().map(|g| g.d2h_bytes as f64))),
    signal!("inferscope.gpu.sync_time", "inferscope_gpu_sync_seconds", "s", Counter,
        "Host time blocked in CUDA synchronisation, summed over threads.",
        |w, o| one(o, w.gpu.as_ref().map(|g| g.sync_ms * MS))),
    signal!("inferscope.gpu.launches", "inferscope_gpu_launches", "{launch}", Counter,
        "CUDA kernel and graph launches.",
        |w, o| one(o, w.gpu.as_ref().map(|g| g.launches as f64))),
    signal!("inferscope.gpu.memory.used_ratio", "inferscope_gpu_memory_used_ratio", "1", Gauge,
        "Device memory used over total (NVML), 0 to 1.",
        |w, o| one(o, w.gpu.as_ref().and_then(|g| g.mem_used_frac))),
    signal!("inferscope.gpu.xid_errors", "inferscope_gpu_xid_errors", "{error}", Counter,
        "NVIDIA XID errors (kernel tracepoint and NVML events).",
        |w, o| one(o, w.gpu.as_ref().map(|g| g.xids.max(g.xid_events.len() as u64) as f64))),
    // Each GPU a server uses (NVML), labelled `gpu`.
    signal!("inferscope.gpu.device.memory.used", "inferscope_gpu_device_memory_used_bytes", "By", Gauge,
        "Framebuffer memory in use on the GPU (NVML).",
        |w, o| per_gpu(o, w, |d| d.memory_used_bytes.map(|b| b as f64), 1.0)),
    signal!("inferscope.gpu.device.memory.reserved", "inferscope_gpu_device_memory_reserved_bytes", "By", Gauge,
        "Framebuffer memory the driver reserves on the GPU (NVML).",
        |w, o| per_gpu(o, w, |d| d.memory_reserved_bytes.map(|b| b as f64), 1.0)),
    signal!("inferscope.gpu.device.memory.total", "inferscope_gpu_device_memory_total_bytes", "By", Gauge,
        "Framebuffer memory installed on the GPU (NVML).",
        |w, o| per_gpu(o, w, |d| d.memory_total_bytes.map(|b| b as f64), 1.0)),
    signal!("inferscope.gpu.device.sm.utilization", "inferscope_gpu_device_sm_utilization_ratio", "1", Gauge,
        "Share of time a kernel ran on the GPU, 0 to 1 (NVML GPU utilisation, window mean).",
        |w, o| per_gpu(o, w, |d| d.sm_util_percent.map(|p| p / 100.0), 1.0)),
    signal!("inferscope.gpu.device.memory_bandwidth.utilization", "inferscope_gpu_device_memory_bandwidth_utilization_ratio", "1", Gauge,
        "Share of time device memory was read or written, 0 to 1 (NVML, window mean).",
        |w, o| per_gpu(o, w, |d| d.mem_bw_util_percent.map(|p| p / 100.0), 1.0)),
    signal!("inferscope.gpu.device.energy", "inferscope_gpu_device_energy_joules", "J", Counter,
        "Energy the GPU used (NVML's total energy counter), per GPU the server uses.",
        |w, o| per_gpu(o, w, |d| d.energy_j, 1.0)),
    signal!("inferscope.gpu.device.power", "inferscope_gpu_device_power_watts", "W", Gauge,
        "GPU power draw (NVML, window mean).",
        |w, o| per_gpu(o, w, |d| d.power_w, 1.0)),
    signal!("inferscope.gpu.device.power.limit", "inferscope_gpu_device_power_limit_watts", "W", Gauge,
        "GPU power limit the driver enforces (NVML).",
        |w, o| per_gpu(o, w, |d| d.power_limit_w, 1.0)),
    signal!("inferscope.gpu.device.sm.clock", "inferscope_gpu_device_sm_clock_hertz", "Hz", Gauge,
        "GPU SM clock (NVML, window mean).",
        |w, o| per_gpu(o, w, |d| d.sm_clock_mhz, 1e6)),
    signal!("inferscope.gpu.device.throttled", "inferscope_gpu_device_throttled_ratio", "1", Gauge,
        "Share of the window's NVML samples with a power or thermal slowdown active, 0 to 1.",
        |w, o| per_gpu(o, w, |d| d.throttle_share, 1.0)),
    signal!("inferscope.gpu.device.pcie.transmit", "inferscope_gpu_device_pcie_transmit_bytes_per_second", "By/s", Gauge,
        "PCIe throughput from the GPU to the host (NVML, window mean).",
        |w, o| per_gpu(o, w, |d| d.pcie_tx_bytes_per_s, 1.0)),
    signal!("inferscope.gpu.device.pcie.receive", "inferscope_gpu_device_pcie_receive_bytes_per_second", "By/s", Gauge,
        "PCIe throughput from the host to the GPU (NVML, window mean).",
        |w, o| per_gpu(o, w, |d| d.pcie_rx_bytes_per_s, 1.0)),
    signal!("inferscope.gpu.device.processes", "inferscope_gpu_device_processes", "{process}", Gauge,
        "Processes on the GPU (NVML).",
        |w, o| per_gpu(o, w, |d| Some(d.processes.len() as f64), 1.0)),
];

/// The bounded label set of time-line metrics (never per request).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Labels {
    /// Scenario name (e.g. baseline, soak, burst).
    pub scenario: Option<String>,
    /// Phase of the run; when `None`, the window's own phase is used.
    pub phase: Option<String>,
    /// Target endpoint (e.g. `chat`, `http://vllm:8000/v1/chat/completions`).
    pub endpoint: Option<String>,
    /// Load level, e.g. the concurrency or the target rate, as text.
    pub load_level: Option<String>,
    /// The server the series describe (`server` and the `k8s.*` attributes), on a node.
    pub server: Option<ServerIdentity>,
}

impl Labels {
    /// `(key, value)` pairs of the labels that are set, with `phase` falling back to the
    /// window's phase, then the server's identity. Keys are OTLP attribute names; Prometheus
    /// writes their dots as underscores (`k8s.pod.name` -> `k8s_pod_name`).
    #[must_use]
    pub fn pairs(&self, window_phase: Option<&str>) -> Vec<(&'static str, String)> {
        let phase = self.phase.as_deref().or(window_phase);
        let mut out: Vec<(&'static str, String)> = [
            ("scenario", self.scenario.as_deref()),
            ("phase", phase),
            ("endpoint", self.endpoint.as_deref()),
            ("load_level", self.load_level.as_deref()),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k, v.to_owned())))
        .collect();
        out.extend(self.server.iter().flat_map(ServerIdentity::attributes));
        out
    }

    /// The labels of a server's series on a node.
    #[must_use]
    pub fn of_server(server: &ServerIdentity) -> Self {
        Self {
            server: Some(server.clone()),
            ..Self::default()
        }
    }
}

/// Running totals of the counter signals, for exporters that publish cumulative values.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Totals {
    sums: BTreeMap<&'static str, f64>,
}

impl Totals {
    /// Adds one closed window's counter values. Call once per window.
    pub fn add(&mut self, window: &Window) {
        for signal in SIGNALS.iter().filter(|s| s.kind == Kind::Counter) {
            for p in signal.points(window) {
                *self.sums.entry(signal.name).or_insert(0.0) += p.value;
            }
        }
    }

    /// Total of the counter named `name` (OpenTelemetry name), if its source was ever seen.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<f64> {
        self.sums.get(name).copied()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::collect::timeline::{LoadSignals, RunqSignals};

    #[test]
    fn names_are_unique_and_well_formed() {
        let mut otel = HashSet::new();
        let mut prom = HashSet::new();
        for s in SIGNALS {
            assert!(otel.insert(s.name), "duplicate {}", s.name);
            assert!(prom.insert(s.prom), "duplicate {}", s.prom);
            assert!(s.name.starts_with("inferscope."), "{}", s.name);
            assert!(
                s.prom
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            );
            // Prometheus reserves these suffixes for other types.
            for bad in ["_total", "_count", "_sum", "_bucket"] {
                assert!(!s.prom.ends_with(bad), "{}", s.prom);
            }
            if s.unit == "s" {
                assert!(s.prom.ends_with("_seconds"), "{}", s.prom);
            }
        }
    }

    #[test]
    fn converts_units_and_accumulates_counters() {
        let w = Window {
            load: Some(LoadSignals {
                requests: 10,
                ttft_ms: Some(Quantiles {
                    p50: 100.0,
                    p95: 200.0,
                    p99: 300.0,
                    max: 400.0,
                }),
                ..LoadSignals::default()
            }),
            runq: Some(RunqSignals {
                p99_us: 2500.0,
                total_ms: 1500.0,
                ..RunqSignals::default()
            }),
            ..Window::default()
        };
        let ttft = SIGNALS
            .iter()
            .find(|s| s.name == "inferscope.load.time_to_first_token")
            .unwrap();
        let points = ttft.points(&w);
        assert_eq!(points.len(), 4);
        assert_eq!(
            points[1],
            Point {
                stat: Some("p95"),
                gpu: None,
                value: 0.2
            }
        );
        let runq = SIGNALS
            .iter()
            .find(|s| s.name == "inferscope.runq.delay")
            .unwrap();
        assert!((runq.points(&w)[1].value - 0.0025).abs() < 1e-12);
        // A source without evidence yields nothing, not zero.
        let gpu = SIGNALS
            .iter()
            .find(|s| s.name == "inferscope.gpu.launches")
            .unwrap();
        assert!(gpu.points(&w).is_empty());

        let mut t = Totals::default();
        t.add(&w);
        t.add(&w);
        assert_eq!(t.get("inferscope.load.requests"), Some(20.0));
        assert_eq!(t.get("inferscope.runq.wait_time"), Some(3.0));
        assert_eq!(t.get("inferscope.gpu.launches"), None);
    }

    /// A hop's calls and the time its callers wait reach Prometheus and OTLP.
    #[test]
    fn a_hops_calls_and_wait_are_published() {
        let w = Window {
            net: Some(crate::collect::timeline::NetSignals {
                called_exchanges: 5,
                called_first_token_p50_ms: Some(120.0),
                ..Default::default()
            }),
            ..Window::default()
        };
        let of = |name: &str| SIGNALS.iter().find(|s| s.name == name).unwrap().points(&w);
        assert!((of("inferscope.hop.calls")[0].value - 5.0).abs() < 1e-12);
        let wait = of("inferscope.hop.first_token");
        assert_eq!(wait[0].stat, Some("p50"));
        assert!((wait[0].value - 0.12).abs() < 1e-12);
    }

    /// Each GPU's NVML fields reach the catalogue (and so Prometheus and OTLP) with its `gpu`
    /// label, in the catalogue's units.
    #[test]
    fn each_gpu_is_published_with_its_label() {
        use crate::collect::timeline::{GpuProcessUse, GpuSignals};
        use crate::gpu::nvml::ClockEventReason;
        let gpu = |index, power_w, throttle_share| GpuDevice {
            index,
            samples: 2,
            memory_used_bytes: Some(40 << 30),
            memory_reserved_bytes: Some(1 << 29),
            memory_total_bytes: Some(80 << 30),
            sm_util_percent: Some(95.0),
            mem_bw_util_percent: Some(40.0),
            power_w: Some(power_w),
            power_limit_w: Some(700.0),
            sm_clock_mhz: Some(1410.0),
            throttle_reasons: vec![ClockEventReason::SwPowerCap],
            throttle_share: Some(throttle_share),
            pcie_tx_bytes_per_s: Some(2e6),
            pcie_rx_bytes_per_s: Some(8e6),
            processes: vec![GpuProcessUse {
                pid: 7,
                used_bytes: None,
            }],
            ..GpuDevice::default()
        };
        let w = Window {
            gpu: Some(GpuSignals {
                devices: vec![gpu(0, 699.0, 1.0), gpu(3, 300.0, 0.0)],
                ..GpuSignals::default()
            }),
            ..Window::default()
        };
        let read = |name: &str| -> Vec<(Option<u32>, f64)> {
            SIGNALS
                .iter()
                .find(|s| s.name == name)
                .unwrap_or_else(|| panic!("{name} not in the catalogue"))
                .points(&w)
                .into_iter()
                .map(|p| (p.gpu, p.value))
                .collect()
        };
        assert_eq!(
            read("inferscope.gpu.device.power"),
            [(Some(0), 699.0), (Some(3), 300.0)]
        );
        assert_eq!(
            read("inferscope.gpu.device.power.limit")[0],
            (Some(0), 700.0)
        );
        assert_eq!(read("inferscope.gpu.device.sm.clock")[1], (Some(3), 1.41e9));
        assert_eq!(
            read("inferscope.gpu.device.sm.utilization")[0],
            (Some(0), 0.95)
        );
        assert_eq!(
            read("inferscope.gpu.device.memory_bandwidth.utilization")[0],
            (Some(0), 0.4)
        );
        assert_eq!(
            read("inferscope.gpu.device.throttled"),
            [(Some(0), 1.0), (Some(3), 0.0)]
        );
        assert_eq!(
            read("inferscope.gpu.device.memory.reserved")[0],
            (Some(0), f64::from(1u32 << 29))
        );
        assert_eq!(
            read("inferscope.gpu.device.pcie.receive")[0],
            (Some(0), 8e6)
        );
        assert_eq!(read("inferscope.gpu.device.processes")[0], (Some(0), 1.0));
    }

    #[test]
    fn labels_fall_back_to_window_phase() {
        let l = Labels {
            scenario: Some("burst".into()),
            ..Labels::default()
        };
        assert_eq!(
            l.pairs(Some("peak")),
            vec![
                ("scenario", "burst".to_owned()),
                ("phase", "peak".to_owned())
            ]
        );
    }
}

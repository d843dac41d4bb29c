//! NVML sampler: per-GPU memory, utilisation, SM clock, power, clock event
//! reasons and per-process memory at a fixed interval.
//!
//! `libnvidia-ml.so.1` is opened at run time (nvml-wrapper uses `dlopen`), so
//! the daemon builds and runs without a GPU; then [`spawn`] returns
//! [`GpuStatus::NoDriver`], logs one info line, and starts nothing.
//! NVML calls block, so sampling runs on its own thread and hands samples to
//! async code through a bounded tokio channel.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{Clock, PcieUtilCounter};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, EventSet, Nvml};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

/// Whether GPU sampling is possible on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuStatus {
    /// NVML works; sampling runs.
    Ready {
        /// The driver version NVML reports.
        driver_version: String,
        /// Number of GPUs.
        devices: u32,
    },
    /// No NVIDIA driver (no NVML library, or the kernel driver is not loaded).
    /// Not an error: the GPU section of a report says so.
    NoDriver {
        /// What NVML said, logged at info level (`RUST_LOG=inferscope=info`).
        detail: String,
    },
    /// The driver is there but NVML refused (permissions, a lost GPU, ...).
    Unavailable {
        /// What NVML said.
        reason: String,
    },
}

impl fmt::Display for GpuStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ready {
                driver_version,
                devices,
            } => write!(f, "{devices} GPU(s), NVIDIA driver {driver_version}"),
            Self::NoDriver { .. } => f.write_str("no NVIDIA driver"),
            Self::Unavailable { reason } => write!(f, "NVML unavailable: {reason}"),
        }
    }
}

/// NVML's clock event reasons ("throttle reasons") bitmask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClockEventReasons(pub u64);

/// One of NVML's clock event reasons (`nvmlClocksEventReason*` in nvml.h): why the SM clock
/// is below its maximum.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ClockEventReason {
    /// Nothing runs on the GPU.
    Idle,
    /// Application clocks are set below the maximum.
    AppClocksSetting,
    /// The software power cap (the power limit) holds the clocks down.
    SwPowerCap,
    /// Hardware slowdown (temperature or an external power brake signal).
    HwSlowdown,
    /// Clocks follow another GPU of a sync-boost group.
    SyncBoost,
    /// Software thermal slowdown: a temperature limit.
    SwThermal,
    /// Hardware thermal slowdown.
    HwThermal,
    /// Hardware power brake (an external power supply signal).
    HwPowerBrake,
    /// Display clock settings.
    DisplayClocks,
}

impl ClockEventReason {
    /// Every reason with its bit, in bit order.
    pub const ALL: [(u64, ClockEventReason); 9] = [
        (0x1, Self::Idle),
        (0x2, Self::AppClocksSetting),
        (0x4, Self::SwPowerCap),
        (0x8, Self::HwSlowdown),
        (0x10, Self::SyncBoost),
        (0x20, Self::SwThermal),
        (0x40, Self::HwThermal),
        (0x80, Self::HwPowerBrake),
        (0x100, Self::DisplayClocks),
    ];

    /// The `snake_case` name used in JSON and evidence.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::AppClocksSetting => "app_clocks_setting",
            Self::SwPowerCap => "sw_power_cap",
            Self::HwSlowdown => "hw_slowdown",
            Self::SyncBoost => "sync_boost",
            Self::SwThermal => "sw_thermal",
            Self::HwThermal => "hw_thermal",
            Self::HwPowerBrake => "hw_power_brake",
            Self::DisplayClocks => "display_clocks",
        }
    }

    /// True for a power or thermal slowdown: the GPU runs slower than it could under load.
    #[must_use]
    pub fn is_slowdown(self) -> bool {
        matches!(
            self,
            Self::SwPowerCap
                | Self::HwSlowdown
                | Self::SwThermal
                | Self::HwThermal
                | Self::HwPowerBrake
        )
    }
}

impl ClockEventReasons {
    /// The known reasons that are set, in bit order.
    #[must_use]
    pub fn reasons(self) -> Vec<ClockEventReason> {
        ClockEventReason::ALL
            .iter()
            .filter(|(bit, _)| self.0 & bit != 0)
            .map(|&(_, r)| r)
            .collect()
    }

    /// Names of the known bits that are set, in bit order.
    #[must_use]
    pub fn names(self) -> Vec<&'static str> {
        self.reasons()
            .into_iter()
            .map(ClockEventReason::name)
            .collect()
    }

    /// Set bits this version does not know.
    #[must_use]
    pub fn unknown_bits(self) -> u64 {
        self.0 & !ClockEventReason::ALL.iter().fold(0, |m, (bit, _)| m | bit)
    }

    /// True when a power, thermal or hardware slowdown is active.
    #[must_use]
    pub fn is_slowed_down(self) -> bool {
        self.reasons()
            .into_iter()
            .any(ClockEventReason::is_slowdown)
    }
}

impl fmt::Display for ClockEventReasons {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = self.names().into_iter().map(str::to_owned).collect();
        if self.unknown_bits() != 0 {
            parts.push(format!("0x{:x}", self.unknown_bits()));
        }
        if parts.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&parts.join(","))
        }
    }
}

/// GPU memory held by one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuProcess {
    /// Host PID as NVML reports it.
    pub pid: u32,
    /// Bytes used; `None` when NVML cannot tell (e.g. some MIG or container setups).
    pub used_bytes: Option<u64>,
}

/// One device at one instant; a field NVML could not read is `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSample {
    /// NVML device index.
    pub index: u32,
    /// Product name.
    pub name: Option<String>,
    /// `GPU-...` UUID.
    pub uuid: Option<String>,
    /// Framebuffer memory in use, bytes.
    pub memory_used_bytes: Option<u64>,
    /// Framebuffer memory the driver reserves (not usable by processes), bytes.
    pub memory_reserved_bytes: Option<u64>,
    /// Framebuffer memory installed, bytes.
    pub memory_total_bytes: Option<u64>,
    /// Percent of the sample period with a kernel running (not SM occupancy).
    pub gpu_util_percent: Option<u32>,
    /// Percent of the sample period with device memory being read or written.
    pub memory_util_percent: Option<u32>,
    /// SM clock, MHz.
    pub sm_clock_mhz: Option<u32>,
    /// Power draw, milliwatts.
    pub power_mw: Option<u32>,
    /// The power limit the driver enforces (the cap), milliwatts.
    pub power_limit_mw: Option<u32>,
    /// Energy the device used since the driver loaded, millijoules (NVML's total energy
    /// counter, Volta and later): a window's joules are its difference.
    pub energy_mj: Option<u64>,
    /// `PCIe` transmit throughput (device to host), KB/s over NVML's 20 ms window.
    pub pcie_tx_kbps: Option<u32>,
    /// `PCIe` receive throughput (host to device), KB/s.
    pub pcie_rx_kbps: Option<u32>,
    /// Why clocks are below maximum.
    pub clock_event_reasons: Option<ClockEventReasons>,
    /// Compute and graphics processes with their memory, by PID.
    pub processes: Vec<GpuProcess>,
}

/// All devices at one instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuSample {
    /// Wall-clock time of the sample.
    pub at: SystemTime,
    /// Monotonic time of the sample.
    pub instant: Instant,
    /// One entry per device that could be opened.
    pub devices: Vec<DeviceSample>,
    /// XID errors NVML reported since the previous sample.
    pub xids: Vec<XidReport>,
}

/// An XID error as NVML's critical-XID event reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XidReport {
    /// NVML index of the device it occurred on, when NVML could tell.
    pub device: Option<u32>,
    /// The XID (e.g. 79: the GPU fell off the bus); `None` when NVML did not say.
    pub code: Option<u64>,
}

/// Where the sampler thread reads the GPUs from: NVML itself ([`NvmlReader`]), or a scripted
/// test double in tests (`gpu::nvml_double::NvmlTestDouble`).
pub trait GpuSource {
    /// Reads every device once, with the XIDs reported since the previous call.
    fn sample(&mut self) -> GpuSample;
}

/// Sampler settings.
#[derive(Debug, Clone)]
pub struct NvmlConfig {
    /// Time between samples.
    pub interval: Duration,
    /// Channel capacity in samples (at least 1).
    pub capacity: usize,
    /// Load NVML from this file instead of `libnvidia-ml.so.1`.
    pub lib_path: Option<PathBuf>,
}

impl Default for NvmlConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(1),
            capacity: 16,
            lib_path: None,
        }
    }
}

/// A running sampler, or the reason there is none.
#[derive(Debug)]
pub struct NvmlTask {
    /// What NVML initialisation found.
    pub status: GpuStatus,
    /// Samples, when [`GpuStatus::Ready`].
    pub rx: Option<mpsc::Receiver<GpuSample>>,
    dropped: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl NvmlTask {
    /// A task that samples nothing, for `status`.
    fn idle(status: GpuStatus) -> Self {
        Self {
            status,
            rx: None,
            dropped: Arc::new(AtomicU64::new(0)),
            stop: Arc::new(AtomicBool::new(false)),
            thread: None,
        }
    }

    /// Samples not delivered because the channel was full.
    #[must_use]
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl Drop for NvmlTask {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // The thread notices within one interval; do not block the caller on it.
        drop(self.thread.take());
    }
}

/// Maps an NVML initialisation error to a status: a missing library or
/// driver is [`GpuStatus::NoDriver`], anything else [`GpuStatus::Unavailable`].
#[must_use]
pub fn status_from_init_error(e: &NvmlError) -> GpuStatus {
    match e {
        NvmlError::LibloadingError(_)
        | NvmlError::FailedToLoadSymbol(_)
        | NvmlError::LibraryNotFound
        | NvmlError::DriverNotLoaded => GpuStatus::NoDriver {
            detail: e.to_string(),
        },
        other => GpuStatus::Unavailable {
            reason: other.to_string(),
        },
    }
}

/// Initialises NVML and starts sampling on a thread.
///
/// Never fails: without a driver the task holds [`GpuStatus::NoDriver`] and no receiver.
#[must_use]
pub fn spawn(config: &NvmlConfig) -> NvmlTask {
    let init = match &config.lib_path {
        Some(path) => Nvml::builder().lib_path(path.as_os_str()).init(),
        None => Nvml::init(),
    };
    let nvml = match init {
        Ok(nvml) => nvml,
        Err(e) => {
            let status = status_from_init_error(&e);
            if let GpuStatus::NoDriver { detail } = &status {
                tracing::info!("GPU: no NVIDIA driver ({detail})");
            } else {
                tracing::warn!("GPU: {status}");
            }
            return NvmlTask::idle(status);
        }
    };
    let devices = match nvml.device_count() {
        Ok(n) => n,
        Err(e) => {
            return NvmlTask::idle(GpuStatus::Unavailable {
                reason: format!("device count: {e}"),
            });
        }
    };
    let driver_version = nvml
        .sys_driver_version()
        .unwrap_or_else(|_| "unknown".to_owned());
    let status = GpuStatus::Ready {
        driver_version,
        devices,
    };
    tracing::info!("GPU: {status}");
    start(status, config, move |sampler| {
        let mut reader = NvmlReader::new(&nvml, devices);
        sampler.run(&mut reader);
    })
}

/// Starts sampling `source` on a thread, as [`spawn`] samples NVML: tests drive the sampler,
/// its channel and its drop count through a scripted source this way.
#[must_use]
pub fn spawn_source<S: GpuSource + Send + 'static>(
    mut source: S,
    status: GpuStatus,
    config: &NvmlConfig,
) -> NvmlTask {
    start(status, config, move |sampler| sampler.run(&mut source))
}

/// The sampler thread's end of the channel: where samples go, what was dropped, when to stop.
struct Sampler {
    interval: Duration,
    tx: mpsc::Sender<GpuSample>,
    dropped: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl Sampler {
    /// Samples `source` every interval until stopped or the receiver is gone; a sample the
    /// full channel cannot take is dropped and counted.
    fn run(&self, source: &mut dyn GpuSource) {
        while !self.stop.load(Ordering::Relaxed) {
            let started = Instant::now();
            let sample = source.sample();
            match self.tx.try_send(sample) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                }
                Err(mpsc::error::TrySendError::Closed(_)) => return,
            }
            std::thread::sleep(self.interval.saturating_sub(started.elapsed()));
        }
    }
}

/// Runs `body` on the sampler thread with the sending end of a new channel.
fn start(
    status: GpuStatus,
    config: &NvmlConfig,
    body: impl FnOnce(Sampler) + Send + 'static,
) -> NvmlTask {
    let (tx, rx) = mpsc::channel(config.capacity.max(1));
    let sampler = Sampler {
        interval: config.interval,
        tx,
        dropped: Arc::new(AtomicU64::new(0)),
        stop: Arc::new(AtomicBool::new(false)),
    };
    let (dropped, stop) = (Arc::clone(&sampler.dropped), Arc::clone(&sampler.stop));
    let thread = std::thread::Builder::new()
        .name("nvml-sampler".to_owned())
        .spawn(move || body(sampler))
        .ok();
    if thread.is_none() {
        return NvmlTask::idle(GpuStatus::Unavailable {
            reason: "cannot start the sampler thread".to_owned(),
        });
    }
    NvmlTask {
        status,
        rx: Some(rx),
        dropped,
        stop,
        thread,
    }
}

/// NVML as a [`GpuSource`]: every device's fields, and the XIDs NVML's critical-XID events
/// reported since the previous sample (where the driver supports events; only a real GPU
/// exercises this path).
pub struct NvmlReader<'n> {
    nvml: &'n Nvml,
    count: u32,
    events: Option<EventSet<'n>>,
}

impl<'n> NvmlReader<'n> {
    /// Opens `count` devices' critical-XID events on one event set (devices that refuse are
    /// sampled without them).
    #[must_use]
    pub fn new(nvml: &'n Nvml, count: u32) -> Self {
        let mut events = nvml.create_event_set().ok();
        for i in 0..count {
            let (Some(set), Ok(d)) = (events.take(), nvml.device_by_index(i)) else {
                continue;
            };
            // A refusal releases the set: start a new one for the other devices.
            events = match d.register_events(EventTypes::CRITICAL_XID_ERROR, set) {
                Ok(set) => Some(set),
                Err(e) => {
                    tracing::info!("GPU {i}: no XID events from NVML ({e})");
                    nvml.create_event_set().ok()
                }
            };
        }
        Self {
            nvml,
            count,
            events,
        }
    }

    /// The XIDs waiting in the event set (non-blocking).
    fn xids(&self) -> Vec<XidReport> {
        let mut out = Vec::new();
        let Some(set) = self.events.as_ref() else {
            return out;
        };
        // Bounded: a storm of events is read over several samples.
        while out.len() < 64 {
            let Ok(ev) = set.wait(0) else { break };
            out.push(XidReport {
                device: ev.device.index().ok(),
                code: match ev.event_data {
                    Some(XidError::Value(v)) => Some(v),
                    Some(XidError::Unknown) | None => None,
                },
            });
        }
        out
    }
}

impl GpuSource for NvmlReader<'_> {
    fn sample(&mut self) -> GpuSample {
        let mut s = sample_all(self.nvml, self.count);
        s.xids = self.xids();
        s
    }
}

/// Reads every device once (without XIDs: [`NvmlReader`] adds those).
#[must_use]
pub fn sample_all(nvml: &Nvml, count: u32) -> GpuSample {
    let at = SystemTime::now();
    let instant = Instant::now();
    let devices = (0..count)
        .filter_map(|i| nvml.device_by_index(i).ok().map(|d| sample_device(i, &d)))
        .collect();
    GpuSample {
        at,
        instant,
        devices,
        xids: Vec::new(),
    }
}

fn sample_device(index: u32, d: &Device<'_>) -> DeviceSample {
    let memory = d.memory_info().ok();
    let util = d.utilization_rates().ok();
    let mut procs: Vec<(u32, UsedGpuMemory)> = Vec::new();
    for list in [
        d.running_compute_processes(),
        d.running_graphics_processes(),
    ]
    .into_iter()
    .flatten()
    {
        procs.extend(list.into_iter().map(|p| (p.pid, p.used_gpu_memory)));
    }
    DeviceSample {
        index,
        name: d.name().ok(),
        uuid: d.uuid().ok(),
        memory_used_bytes: memory.as_ref().map(|m| m.used),
        memory_reserved_bytes: memory.as_ref().map(|m| m.reserved),
        memory_total_bytes: memory.as_ref().map(|m| m.total),
        gpu_util_percent: util.as_ref().map(|u| u.gpu),
        memory_util_percent: util.as_ref().map(|u| u.memory),
        sm_clock_mhz: d.clock_info(Clock::SM).ok(),
        power_mw: d.power_usage().ok(),
        power_limit_mw: d.enforced_power_limit().ok(),
        energy_mj: d.total_energy_consumption().ok(),
        pcie_tx_kbps: d.pcie_throughput(PcieUtilCounter::Send).ok(),
        pcie_rx_kbps: d.pcie_throughput(PcieUtilCounter::Receive).ok(),
        clock_event_reasons: d
            .current_throttle_reasons()
            .ok()
            .map(|r| ClockEventReasons(r.bits())),
        processes: merge_processes(procs),
    }
}

/// One entry per PID: a process that is both a compute and a graphics
/// client appears in both NVML lists with the same memory, so take the larger.
#[must_use]
pub fn merge_processes(list: Vec<(u32, UsedGpuMemory)>) -> Vec<GpuProcess> {
    let mut out: Vec<GpuProcess> = Vec::new();
    for (pid, mem) in list {
        let used = match mem {
            UsedGpuMemory::Used(b) => Some(b),
            UsedGpuMemory::Unavailable => None,
        };
        if let Some(p) = out.iter_mut().find(|p| p.pid == pid) {
            p.used_bytes = p.used_bytes.max(used);
        } else {
            out.push(GpuProcess {
                pid,
                used_bytes: used,
            });
        }
    }
    out.sort_by_key(|p| p.pid);
    out
}

#[cfg(test)]
#[path = "nvml_tests.rs"]
mod tests;

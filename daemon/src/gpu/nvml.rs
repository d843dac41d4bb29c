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

use nvml_wrapper::enum_wrappers::device::Clock;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
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

/// Bit -> name, from `nvmlClocksEventReason*` in nvml.h.
const REASONS: [(u64, &str); 9] = [
    (0x1, "idle"),
    (0x2, "app_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal"),
    (0x40, "hw_thermal"),
    (0x80, "hw_power_brake"),
    (0x100, "display_clocks"),
];

/// Reasons that mean the GPU runs slower than it could under load.
const SLOWDOWN_MASK: u64 = 0x4 | 0x8 | 0x20 | 0x40 | 0x80;

impl ClockEventReasons {
    /// Names of the known bits that are set, in bit order.
    #[must_use]
    pub fn names(self) -> Vec<&'static str> {
        REASONS
            .iter()
            .filter(|(bit, _)| self.0 & bit != 0)
            .map(|&(_, name)| name)
            .collect()
    }

    /// Set bits this version does not know.
    #[must_use]
    pub fn unknown_bits(self) -> u64 {
        self.0 & !REASONS.iter().fold(0, |m, (bit, _)| m | bit)
    }

    /// True when a power, thermal or hardware slowdown is active.
    #[must_use]
    pub fn is_slowed_down(self) -> bool {
        self.0 & SLOWDOWN_MASK != 0
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
    let dropped = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let idle = |status: GpuStatus| NvmlTask {
        status,
        rx: None,
        dropped: Arc::clone(&dropped),
        stop: Arc::clone(&stop),
        thread: None,
    };
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
            return idle(status);
        }
    };
    let devices = match nvml.device_count() {
        Ok(n) => n,
        Err(e) => {
            return idle(GpuStatus::Unavailable {
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
    let (tx, rx) = mpsc::channel(config.capacity.max(1));
    let interval = config.interval;
    let (thread_dropped, thread_stop) = (Arc::clone(&dropped), Arc::clone(&stop));
    let thread = std::thread::Builder::new()
        .name("nvml-sampler".to_owned())
        .spawn(move || sample_loop(&nvml, devices, interval, &tx, &thread_dropped, &thread_stop))
        .ok();
    if thread.is_none() {
        return idle(GpuStatus::Unavailable {
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

fn sample_loop(
    nvml: &Nvml,
    count: u32,
    interval: Duration,
    tx: &mpsc::Sender<GpuSample>,
    dropped: &AtomicU64,
    stop: &AtomicBool,
) {
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        let sample = sample_all(nvml, count);
        match tx.try_send(sample) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                dropped.fetch_add(1, Ordering::Relaxed);
            }
            Err(mpsc::error::TrySendError::Closed(_)) => return,
        }
        std::thread::sleep(interval.saturating_sub(started.elapsed()));
    }
}

/// Reads every device once.
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
        memory_total_bytes: memory.as_ref().map(|m| m.total),
        gpu_util_percent: util.as_ref().map(|u| u.gpu),
        memory_util_percent: util.as_ref().map(|u| u.memory),
        sm_clock_mhz: d.clock_info(Clock::SM).ok(),
        power_mw: d.power_usage().ok(),
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

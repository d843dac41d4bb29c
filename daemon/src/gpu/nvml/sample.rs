//! What one sample holds (every device's state, the XIDs since the previous sample), and where
//! the sampler reads it from.

use std::time::{Instant, SystemTime};

use super::clocks::ClockEventReasons;

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
///
/// [`NvmlReader`]: super::NvmlReader
pub trait GpuSource {
    /// Reads every device once, with the XIDs reported since the previous call.
    fn sample(&mut self) -> GpuSample;
}

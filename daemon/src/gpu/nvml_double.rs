//! A test double of NVML: the project's machines have no GPU, so tests drive the sampler, the
//! collector and the rules with a scripted [`GpuSource`] that plays back a trace of device
//! states (healthy, power-capped, thermally throttled, memory full, an XID), one state per
//! sample, as NVML would report them. What only a real GPU proves (that NVML fills each field
//! the same way) is checked by `tests::default_library_reports_driver_state` where a driver is
//! present.

use std::time::{Instant, SystemTime};

use super::nvml::{
    ClockEventReasons, DeviceSample, GpuProcess, GpuSample, GpuSource, GpuStatus, XidReport,
};

/// `nvmlClocksEventReasonSwPowerCap`.
pub const SW_POWER_CAP: u64 = 0x4;
/// `nvmlClocksEventReasonSwThermalSlowdown` | `HwThermalSlowdown`.
pub const THERMAL: u64 = 0x20 | 0x40;
/// `nvmlClocksEventReasonGpuIdle`.
pub const IDLE: u64 = 0x1;

/// One sample of the trace: every device's state, and the XIDs NVML reports with it.
#[derive(Debug, Clone, PartialEq)]
pub struct Tick {
    /// The devices.
    pub devices: Vec<DeviceSample>,
    /// XIDs since the previous tick.
    pub xids: Vec<XidReport>,
}

/// The NVML test double: plays `trace` back one tick per sample and repeats the last tick
/// once it is played.
#[derive(Debug, Clone)]
pub struct NvmlTestDouble {
    trace: Vec<Tick>,
    next: usize,
    /// Each device's energy counter, mJ: every tick adds its power draw over one second, as
    /// if the ticks were a second apart.
    energy_mj: Vec<u64>,
}

impl NvmlTestDouble {
    /// A double that plays `trace` (at least one tick).
    #[must_use]
    pub fn new(trace: Vec<Tick>) -> Self {
        assert!(!trace.is_empty(), "a trace needs a tick");
        Self {
            trace,
            next: 0,
            energy_mj: Vec::new(),
        }
    }

    /// The status NVML would report for the trace's devices.
    #[must_use]
    pub fn status(&self) -> GpuStatus {
        GpuStatus::Ready {
            driver_version: "test-double".to_owned(),
            devices: self.trace[0].devices.len() as u32,
        }
    }
}

impl GpuSource for NvmlTestDouble {
    fn sample(&mut self) -> GpuSample {
        let tick = &self.trace[self.next.min(self.trace.len() - 1)];
        self.next += 1;
        let mut devices = tick.devices.clone();
        self.energy_mj.resize(devices.len(), 0);
        for (d, e) in devices.iter_mut().zip(&mut self.energy_mj) {
            *e += u64::from(d.power_mw.unwrap_or(0));
            d.energy_mj = d.energy_mj.or(Some(*e));
        }
        GpuSample {
            at: SystemTime::now(),
            instant: Instant::now(),
            devices,
            xids: tick.xids.clone(),
        }
    }
}

const GIB: u64 = 1 << 30;

/// A healthy 80 GiB, 700 W device at full clock running `pids` (40 GiB in use).
#[must_use]
pub fn healthy(index: u32, pids: &[u32]) -> DeviceSample {
    DeviceSample {
        index,
        name: Some("NVIDIA H100 (test double)".to_owned()),
        uuid: Some(format!("GPU-test-double-{index}")),
        memory_used_bytes: Some(40 * GIB),
        memory_reserved_bytes: Some(GIB / 2),
        memory_total_bytes: Some(80 * GIB),
        gpu_util_percent: Some(60),
        memory_util_percent: Some(30),
        sm_clock_mhz: Some(1980),
        power_mw: Some(350_000),
        power_limit_mw: Some(700_000),
        energy_mj: None,
        pcie_tx_kbps: Some(2_000),
        pcie_rx_kbps: Some(8_000),
        clock_event_reasons: Some(ClockEventReasons(0)),
        processes: pids
            .iter()
            .map(|&pid| GpuProcess {
                pid,
                used_bytes: Some(40 * GIB / pids.len().max(1) as u64),
            })
            .collect(),
    }
}

/// `healthy` at its power cap: the software power cap holds the SM clock down.
#[must_use]
pub fn power_capped(index: u32, pids: &[u32]) -> DeviceSample {
    DeviceSample {
        gpu_util_percent: Some(100),
        sm_clock_mhz: Some(1410),
        power_mw: Some(699_000),
        clock_event_reasons: Some(ClockEventReasons(SW_POWER_CAP)),
        ..healthy(index, pids)
    }
}

/// `healthy` too hot: thermal slowdown (software and hardware).
#[must_use]
pub fn thermal(index: u32, pids: &[u32]) -> DeviceSample {
    DeviceSample {
        gpu_util_percent: Some(100),
        sm_clock_mhz: Some(1100),
        power_mw: Some(420_000),
        clock_event_reasons: Some(ClockEventReasons(THERMAL)),
        ..healthy(index, pids)
    }
}

/// `healthy` with its memory full.
#[must_use]
pub fn memory_full(index: u32, pids: &[u32]) -> DeviceSample {
    DeviceSample {
        memory_used_bytes: Some(80 * GIB - GIB / 4),
        ..healthy(index, pids)
    }
}

/// A tick of `devices` without XIDs.
#[must_use]
pub fn tick(devices: Vec<DeviceSample>) -> Tick {
    Tick {
        devices,
        xids: Vec::new(),
    }
}

/// A tick of `devices` with XID `code` on `device`.
#[must_use]
pub fn tick_with_xid(devices: Vec<DeviceSample>, device: u32, code: u64) -> Tick {
    Tick {
        devices,
        xids: vec![XidReport {
            device: Some(device),
            code: Some(code),
        }],
    }
}

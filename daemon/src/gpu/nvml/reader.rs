//! NVML read: every device's fields, its processes' memory, and the XIDs its critical-XID
//! events reported.

use std::time::{Instant, SystemTime};

use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{Clock, PcieUtilCounter};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::{Device, EventSet, Nvml};

use super::clocks::ClockEventReasons;
use super::sample::{DeviceSample, GpuProcess, GpuSample, GpuSource, XidReport};

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

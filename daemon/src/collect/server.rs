//! The inference server's own `/metrics` and NVML, folded into time-line windows.

use std::time::Duration;

use super::timeline::{GpuSignals, Part, ServerSignals, Window};
use crate::{
    gpu::nvml::{self, DeviceSample, GpuStatus, NvmlConfig, NvmlTask},
    scrape::{
        ScrapeError,
        client::{self, ScrapeConfig, ScrapeTask},
        window::{WindowBuilder, WindowSignals},
    },
};

/// Scrapes a server's `/metrics` and turns each window's scrapes into [`ServerSignals`].
pub struct ServerCollector {
    task: ScrapeTask,
    builder: WindowBuilder,
    /// The latest scrape error, if the latest scrape failed (e.g. the server is down).
    pub last_error: Option<String>,
}

impl ServerCollector {
    /// Starts scraping `url` every `interval` (`tls` for an `https://` URL). Needs a tokio
    /// runtime.
    pub fn start(
        url: &str,
        interval: Duration,
        tls: &crate::tls::TlsOptions,
    ) -> Result<Self, ScrapeError> {
        let mut cfg = ScrapeConfig::new(url);
        cfg.interval = interval;
        cfg.tls = tls.clone();
        Ok(Self {
            task: client::spawn(cfg, 64)?,
            builder: WindowBuilder::new(),
            last_error: None,
        })
    }

    /// Fills `w.server` from the scrapes since the previous call.
    pub fn close_window(&mut self, w: &mut Window) {
        while let Ok(s) = self.task.rx.try_recv() {
            match s.signals {
                Ok(sig) => {
                    self.builder.push(s.instant, sig);
                    self.last_error = None;
                }
                Err(e) => self.last_error = Some(e.to_string()),
            }
        }
        w.server = self.builder.finish().map(|ws| server_signals(&ws));
    }
}

impl Drop for ServerCollector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Maps one window of scraped signals onto the time line's server part.
#[must_use]
pub fn server_signals(w: &WindowSignals) -> ServerSignals {
    ServerSignals {
        engine: w.server,
        running: w.running.map(|g| g.last),
        waiting: w.waiting.map(|g| g.max),
        // No server exports its batch cap as a metric; the run's configuration may supply it.
        max_running: None,
        kv_usage: w.kv_usage.map(|g| g.max),
        preemptions_per_s: w.preemption_activity(),
        prefix_hit_rate: w.prefix_cache_hit_rate,
        queue_time_p50_ms: w.queue_time.map(|l| l.p50 * 1000.0),
        queue_time_p95_ms: w.queue_time.map(|l| l.p95 * 1000.0),
        queue_time_mean_ms: w.queue_time.map(|l| l.mean * 1000.0),
        ttft_p50_ms: w.ttft.map(|l| l.p50 * 1000.0),
        ttft_p95_ms: w.ttft.map(|l| l.p95 * 1000.0),
        ttft_mean_ms: w.ttft.map(|l| l.mean * 1000.0),
        prompt_tokens_per_s: w.prompt_tokens_per_s,
        batch_mean: w.batch_mean.or(w.running.map(|g| g.last)),
        tpot_mean_ms: w
            .itl
            .map(|l| l.mean * 1000.0)
            .or(w.generation_s_per_token.map(|s| s * 1000.0)),
        vector_searches_per_s: w.vector_searches_per_s,
        index_rebuild: w.index_rebuild,
    }
}

/// NVML's view: device memory used over total on the GPUs each server uses.
pub struct NvmlCollector {
    task: NvmlTask,
    /// The newest sample's devices.
    devices: Vec<DeviceSample>,
}

impl NvmlCollector {
    /// Starts sampling; without an NVIDIA driver it only reports that.
    #[must_use]
    pub fn start(interval: Duration) -> Self {
        Self {
            task: nvml::spawn(&NvmlConfig {
                interval,
                capacity: 16,
                lib_path: None,
            }),
            devices: Vec::new(),
        }
    }

    /// Whether a driver was found.
    #[must_use]
    pub fn status(&self) -> &GpuStatus {
        &self.task.status
    }

    /// Sets each part's `gpu.mem_used_frac` from the latest sample, on the GPUs its processes
    /// use ([`used_frac`]).
    pub fn close_windows(&mut self, parts: &mut [Part<'_>]) {
        if let Some(rx) = self.task.rx.as_mut() {
            while let Ok(s) = rx.try_recv() {
                self.devices = s.devices;
            }
        }
        for part in parts {
            if let Some(frac) = used_frac(&self.devices, part.pids) {
                part.window
                    .gpu
                    .get_or_insert_with(GpuSignals::default)
                    .mem_used_frac = Some(frac);
            }
        }
    }
}

/// Memory used over total on the GPUs NVML lists one of `pids` on; on every GPU when NVML
/// lists no process anywhere (it cannot see them from some containers), so the node's GPUs
/// are joined to every server then; `None` for a server on no GPU.
#[must_use]
pub fn used_frac(devices: &[DeviceSample], pids: &[u32]) -> Option<f64> {
    let any_listed = devices.iter().any(|d| !d.processes.is_empty());
    let (used, total) = devices
        .iter()
        .filter(|d| !any_listed || d.processes.iter().any(|p| pids.contains(&p.pid)))
        .fold((0u64, 0u64), |(u, t), d| {
            (
                u + d.memory_used_bytes.unwrap_or(0),
                t + d.memory_total_bytes.unwrap_or(0),
            )
        });
    (total > 0).then(|| used as f64 / total as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::nvml::GpuProcess;

    fn gpu(index: u32, used: u64, pids: &[u32]) -> DeviceSample {
        DeviceSample {
            index,
            name: None,
            uuid: None,
            memory_used_bytes: Some(used),
            memory_total_bytes: Some(100),
            gpu_util_percent: None,
            memory_util_percent: None,
            sm_clock_mhz: None,
            power_mw: None,
            clock_event_reasons: None,
            processes: pids
                .iter()
                .map(|&pid| GpuProcess {
                    pid,
                    used_bytes: None,
                })
                .collect(),
        }
    }

    #[test]
    fn each_server_gets_the_memory_of_the_gpus_it_uses() {
        let devices = [gpu(0, 90, &[10]), gpu(1, 30, &[20, 21])];
        assert_eq!(used_frac(&devices, &[10]), Some(0.9));
        assert_eq!(used_frac(&devices, &[21]), Some(0.3));
        assert_eq!(used_frac(&devices, &[10, 20]), Some(0.6));
        assert_eq!(used_frac(&devices, &[99]), None, "on no GPU");
        // NVML lists no process: every GPU is joined to every server.
        let blind = [gpu(0, 90, &[]), gpu(1, 30, &[])];
        assert_eq!(used_frac(&blind, &[99]), Some(0.6));
        assert_eq!(used_frac(&[], &[1]), None);
    }
}

//! The inference server's own `/metrics` and NVML, folded into time-line windows.

use std::time::Duration;

use super::timeline::{GpuSignals, ServerSignals, Window};
use crate::{
    gpu::nvml::{self, GpuStatus, NvmlConfig, NvmlTask},
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
    }
}

/// NVML's view: device memory used over total, across GPUs.
pub struct NvmlCollector {
    task: NvmlTask,
    last_frac: Option<f64>,
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
            last_frac: None,
        }
    }

    /// Whether a driver was found.
    #[must_use]
    pub fn status(&self) -> &GpuStatus {
        &self.task.status
    }

    /// Sets `w.gpu.mem_used_frac` from the latest sample, if any.
    pub fn close_window(&mut self, w: &mut Window) {
        if let Some(rx) = self.task.rx.as_mut() {
            while let Ok(s) = rx.try_recv() {
                let used: u64 = s.devices.iter().filter_map(|d| d.memory_used_bytes).sum();
                let total: u64 = s.devices.iter().filter_map(|d| d.memory_total_bytes).sum();
                self.last_frac = (total > 0).then(|| used as f64 / total as f64);
            }
        }
        if let Some(frac) = self.last_frac {
            w.gpu.get_or_insert_with(GpuSignals::default).mem_used_frac = Some(frac);
        }
    }
}

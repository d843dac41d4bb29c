//! The node's collectors: kernel probes on the servers' processes (and the load generator's
//! own) and NVML, whose windows are split by server ([`Part`]), and the scrapers of each
//! server's `/metrics` they start. Whatever cannot start is recorded as missing evidence and
//! collection goes on; [`crate::node::Node`] drives them, one time line per server.

use std::{
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use super::{
    kernel::{Exchange, KernelCollector, KernelOptions, Losses, Retransmit},
    server::{NvmlCollector, ServerCollector},
    timeline::Part,
};
use crate::probes::HookStatus;

/// What to watch.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// The inference servers' processes (empty: none yet).
    pub servers: Vec<u32>,
    /// The load generator's own process, when it runs in this one.
    pub loadgen: Option<u32>,
    /// Libraries or binaries exporting the CUDA driver API to hook besides discovered ones.
    pub cuda_targets: Vec<PathBuf>,
    /// Start the kernel probes even with no server yet (the daemon finds servers later);
    /// otherwise no server means no kernel probes.
    pub kernel_without_servers: bool,
    /// A server's Prometheus endpoint, given: the one server's (`stress --explain`), or the
    /// one whose process listens on its port.
    pub metrics_url: Option<String>,
    /// Whom an `https://` metrics endpoint's certificate must come from.
    pub tls: crate::tls::TlsOptions,
    /// Window length.
    pub window: Duration,
}

/// A step of closing a window that failed; the window goes on without that part.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StepError {
    /// The kernel maps could not be read (the window has no kernel evidence).
    #[error("kernel probes: {0}")]
    Kernel(String),
    /// Updating the probes' watch-list failed (e.g. the watch-list is full).
    #[error("watching the new server processes: {0}")]
    Watch(String),
    /// The server's `/metrics` could not be scraped.
    #[error("scraping the server's metrics: {0}")]
    Scrape(String),
}

impl StepError {
    /// A short name for the counter label: `kernel`, `watch` or `scrape`.
    #[must_use]
    pub fn step(&self) -> &'static str {
        match self {
            StepError::Kernel(_) => "kernel",
            StepError::Watch(_) => "watch",
            StepError::Scrape(_) => "scrape",
        }
    }
}

/// The live collectors.
pub struct Session {
    kernel: Option<KernelCollector>,
    /// How often to scrape, and with which TLS ([`Session::scraper`]).
    scrape_every: Duration,
    tls: crate::tls::TlsOptions,
    nvml: NvmlCollector,
    /// Scrapes the scrapers this session started dropped, all of them, gone ones too.
    scrape_drops: Arc<AtomicU64>,
    /// Evidence that is missing and why, for the report.
    pub missing: Vec<String>,
}

impl Session {
    /// Starts every collector it can. Needs a tokio runtime.
    #[must_use]
    pub fn start(opts: &SessionOptions) -> Self {
        let mut missing = Vec::new();
        let kernel = if opts.servers.is_empty() && !opts.kernel_without_servers {
            missing.push(
                "kernel probes of the server: no server process found on this host (give --pid)"
                    .to_string(),
            );
            None
        } else {
            let ko = KernelOptions {
                servers: opts.servers.clone(),
                loadgen: opts.loadgen,
                cuda_targets: opts.cuda_targets.clone(),
                discover_libcuda: true,
            };
            match KernelCollector::start(ko) {
                Ok(k) => {
                    for h in k.hooks().iter().filter(|h| !h.is_attached()) {
                        missing.push(format!(
                            "{}: {}",
                            h.probe,
                            h.reason().unwrap_or("not attached")
                        ));
                    }
                    Some(k)
                }
                Err(e) => {
                    missing.push(format!("kernel probes off: {e}"));
                    None
                }
            }
        };
        let scrape_every = opts.window.min(Duration::from_secs(1)) / 2;
        let nvml = NvmlCollector::start(opts.window);
        Self {
            kernel,
            scrape_every,
            tls: opts.tls.clone(),
            nvml,
            scrape_drops: Arc::new(AtomicU64::new(0)),
            missing,
        }
    }

    /// A scraper of `url` (a server's metrics endpoint), every half window (at most 500 ms).
    pub fn scraper(&self, url: &str) -> Result<ServerCollector, StepError> {
        ServerCollector::start(url, self.scrape_every, &self.tls)
            .map(|c| c.counting_drops_into(Arc::clone(&self.scrape_drops)))
            .map_err(|e| StepError::Scrape(format!("{url}: {e}")))
    }

    /// Whether the kernel probes are running.
    #[must_use]
    pub fn has_kernel(&self) -> bool {
        self.kernel.is_some()
    }

    /// NVML's status, in words.
    #[must_use]
    pub fn gpu_status(&self) -> String {
        self.nvml.status().to_string()
    }

    /// Watches `servers` instead of the processes watched now.
    pub fn watch(&mut self, servers: Vec<u32>) -> Result<(), StepError> {
        let Some(k) = self.kernel.as_mut() else {
            return Ok(());
        };
        let mut opts = k.options().clone();
        opts.servers = servers;
        k.watch(opts).map_err(|e| StepError::Watch(e.to_string()))
    }

    /// Fills each server's window from the kernel and NVML. A step that fails is left out of
    /// the windows and returned; the collectors keep running.
    pub fn close_windows(&mut self, parts: &mut [Part<'_>]) -> Vec<StepError> {
        let mut errors = Vec::new();
        if let Some(k) = self.kernel.as_mut() {
            if let Err(e) = k.close_windows(parts) {
                errors.push(StepError::Kernel(e.to_string()));
            }
            if let Err(e) = k.prune() {
                errors.push(StepError::Kernel(e.to_string()));
            }
        }
        self.nvml.close_windows(parts);
        errors
    }

    /// Forgets the kernel's exchanges and retransmits (nothing will join them).
    pub fn forget_joins(&mut self) {
        if let Some(k) = self.kernel.as_mut() {
            k.forget_joins();
        }
    }

    /// Every hook and whether it is attached.
    #[must_use]
    pub fn hooks(&self) -> Vec<HookStatus> {
        self.kernel
            .as_ref()
            .map(|k| k.hooks().to_vec())
            .unwrap_or_default()
    }

    /// What the kernel, the readers, NVML's sampler and the scrapers lost so far (the
    /// kernel's zero without probes).
    #[must_use]
    pub fn losses(&self) -> Losses {
        Losses {
            nvml: self.nvml.dropped(),
            scrape: self.scrape_drops.load(Ordering::Relaxed),
            ..self
                .kernel
                .as_ref()
                .and_then(|k| k.losses().ok())
                .unwrap_or_default()
        }
    }

    /// Stops collecting; returns what the kernel saw on the server's connections, to join with
    /// the load generator's records.
    #[must_use]
    pub fn finish(&mut self) -> ServerSide {
        if let Some(k) = self.kernel.as_ref()
            && let Ok(l) = k.losses()
            && l.runq + l.sockets + l.cuda + l.channels > 0
        {
            self.missing.push(format!(
                "kernel events lost: run queue {}, sockets {}, CUDA {}, channels {}",
                l.runq, l.sockets, l.cuda, l.channels
            ));
        }
        if let Some(cut) = self.kernel.as_ref().and_then(KernelCollector::joins_cut) {
            self.missing.push(cut);
        }
        let l = self.losses();
        if l.nvml + l.scrape > 0 {
            self.missing.push(format!(
                "samples lost: NVML {}, metrics scrapes {}",
                l.nvml, l.scrape
            ));
        }
        self.kernel
            .take()
            .map(|mut k| {
                k.drain();
                k
            })
            .map(|k| ServerSide {
                exchanges: k.exchanges_with_open(),
                retransmits: k.retransmits().to_vec(),
            })
            .unwrap_or_default()
    }
}

/// The kernel's view of the server's connections over a run.
#[derive(Debug, Clone, Default)]
pub struct ServerSide {
    /// Request/response exchanges.
    pub exchanges: Vec<Exchange>,
    /// Retransmitted segments, by either side.
    pub retransmits: Vec<Retransmit>,
}

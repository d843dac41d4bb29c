//! An explained stress run's collectors: kernel probes on the target's processes (and the load
//! generator's own), the target's `/metrics`, and NVML, closed into windows while the load runs.
//! Whatever cannot start is recorded as missing evidence and the run goes on.

use std::time::{Duration, Instant};

use super::{
    kernel::{Exchange, KernelCollector, KernelOptions, Retransmit},
    server::{NvmlCollector, ServerCollector},
    timeline::{Timeline, now_unix_ms},
};

/// What to watch during the run.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// The inference server's processes (empty: kernel evidence of the server is missing).
    pub servers: Vec<u32>,
    /// The server's Prometheus endpoint.
    pub metrics_url: Option<String>,
    /// Window length.
    pub window: Duration,
}

/// The live collectors and the time line they fill.
pub struct Session {
    kernel: Option<KernelCollector>,
    scraper: Option<ServerCollector>,
    nvml: NvmlCollector,
    /// The time line, one window per tick.
    pub timeline: Timeline,
    /// Windows closed so far.
    closed: u64,
    /// When the last one was closed.
    last_tick: Instant,
    /// Evidence that is missing and why, for the report.
    pub missing: Vec<String>,
}

impl Session {
    /// Starts every collector it can. Needs a tokio runtime.
    #[must_use]
    pub fn start(opts: &SessionOptions) -> Self {
        let mut missing = Vec::new();
        let kernel = if opts.servers.is_empty() {
            missing.push(
                "kernel probes of the server: no server process found on this host (give --pid)"
                    .to_string(),
            );
            None
        } else {
            let ko = KernelOptions {
                servers: opts.servers.clone(),
                loadgen: Some(std::process::id()),
                cuda_targets: Vec::new(),
                discover_libcuda: true,
            };
            match KernelCollector::start(ko) {
                Ok(k) => {
                    for h in k.hooks().iter().filter(|h| !h.attached) {
                        missing.push(format!(
                            "{}: {}",
                            h.probe,
                            h.reason.as_deref().unwrap_or("not attached")
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
        let scraper = match &opts.metrics_url {
            Some(url) => {
                match ServerCollector::start(url, opts.window.min(Duration::from_secs(1)) / 2) {
                    Ok(s) => Some(s),
                    Err(e) => {
                        missing.push(format!("server metrics off: {e}"));
                        None
                    }
                }
            }
            None => None,
        };
        let nvml = NvmlCollector::start(opts.window);
        Self {
            kernel,
            scraper,
            nvml,
            timeline: Timeline::new(now_unix_ms(), opts.window.as_millis() as u64),
            closed: 0,
            last_tick: Instant::now(),
            missing,
        }
    }

    /// Whether the kernel probes are running.
    #[must_use]
    pub fn has_kernel(&self) -> bool {
        self.kernel.is_some()
    }

    /// Closes the next window: call once per window length. Counted, not read from the clock:
    /// a tick a millisecond early or late must neither close one window twice nor skip one
    /// (an empty window reads as missing evidence).
    pub fn tick(&mut self) {
        let t = &mut self.timeline;
        let w = t.at(t.origin_unix_ms + self.closed * t.len_ms + t.len_ms / 2);
        self.closed += 1;
        self.last_tick = Instant::now();
        if let Some(k) = self.kernel.as_mut()
            && let Err(e) = k.close_window(w)
        {
            self.missing.push(format!("kernel probes stopped: {e}"));
            self.kernel = None;
        }
        if let Some(s) = self.scraper.as_mut() {
            s.close_window(w);
        }
        self.nvml.close_window(w);
    }

    /// Closes the window the load ended in when it ran for at least half of it. A shorter tail
    /// (the run ending a few ms after a tick) makes no window: a few ms of evidence make no
    /// verdict, and every source would read as missing.
    pub fn close_tail(&mut self) {
        if self.last_tick.elapsed() * 2 >= Duration::from_millis(self.timeline.len_ms) {
            self.tick();
        }
    }

    /// Stops collecting; returns what the kernel saw on the server's connections, to join with
    /// the load generator's records.
    #[must_use]
    pub fn finish(&mut self) -> ServerSide {
        if let Some(s) = &self.scraper
            && let Some(e) = &s.last_error
        {
            self.missing
                .push(format!("server metrics: last scrape failed: {e}"));
        }
        if let Some(k) = self.kernel.as_ref()
            && let Ok(l) = k.losses()
            && l.runq + l.sockets + l.cuda + l.channels > 0
        {
            self.missing.push(format!("kernel events lost: {l:?}"));
        }
        self.kernel
            .take()
            .map(|k| ServerSide {
                exchanges: k.exchanges().to_vec(),
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

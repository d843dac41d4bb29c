//! What could not be recorded, kernel and userspace, and each drop counter as exported.

use serde::Serialize;

use crate::probes::HookLoss;

/// What could not be recorded, kernel and userspace, exported as `inferscope_dropped_total`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Losses {
    /// Kernel: run-queue samples not recorded (all its hooks).
    pub runq: u64,
    /// Kernel: socket events or connections not recorded (all its hooks).
    pub sockets: u64,
    /// Kernel: CUDA events or calls not recorded (all its hooks).
    pub cuda: u64,
    /// Kernel: the same losses per hook and kind, as exported.
    pub hooks: Vec<HookLoss>,
    /// Userspace: events dropped because a channel was full.
    pub channels: u64,
    /// NVML samples dropped because the sampler's channel was full.
    pub nvml: u64,
    /// Scrapes of the servers' `/metrics` dropped because the scraper's channel was full.
    pub scrape: u64,
}

/// One drop counter as exported: where it arose (`stage`, `what`) and, for the kernel's,
/// which hook lost what.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LossCount {
    /// `kernel`, `channel`, `nvml` or `scrape`.
    pub stage: &'static str,
    /// The family (`runqlat`, `sockets`, `cuda`) or what was dropped (`events`, `samples`,
    /// `scrapes`).
    pub what: &'static str,
    /// The kernel hook that lost it.
    pub hook: Option<&'static str>,
    /// Why the kernel lost it (`ringbuf_full`, `conns_full`, ...).
    pub reason: Option<&'static str>,
    /// How many, since start.
    pub count: u64,
}

impl Losses {
    /// Each count with where it arose, the kernel's per hook, as the drop counters name them.
    #[must_use]
    pub fn labelled(&self) -> Vec<LossCount> {
        let plain = |stage, what, count| LossCount {
            stage,
            what,
            hook: None,
            reason: None,
            count,
        };
        let mut out: Vec<LossCount> = self
            .hooks
            .iter()
            .map(|h| LossCount {
                stage: "kernel",
                what: h.family,
                hook: Some(h.hook),
                reason: Some(h.reason),
                count: h.count,
            })
            .collect();
        out.extend([
            plain("channel", "events", self.channels),
            plain("nvml", "samples", self.nvml),
            plain("scrape", "scrapes", self.scrape),
        ]);
        out
    }
}

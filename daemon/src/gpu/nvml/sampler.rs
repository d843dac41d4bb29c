//! The sampler thread: NVML initialised, a sample every interval handed to async code through
//! a bounded channel, what the full channel dropped.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nvml_wrapper::Nvml;
use tokio::sync::mpsc;

use super::reader::NvmlReader;
use super::sample::{GpuSample, GpuSource};
use super::status::{GpuStatus, status_from_init_error};

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

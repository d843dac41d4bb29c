//! The inference server's own `/metrics` and NVML, folded into time-line windows.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, UNIX_EPOCH};

use super::timeline::{
    GpuDevice, GpuProcessUse, GpuSignals, Part, ServerSignals, Window, XidEvent, XidSource,
};
use crate::{
    gpu::nvml::{
        self, ClockEventReason, ClockEventReasons, DeviceSample, GpuSample, GpuStatus, NvmlConfig,
        NvmlTask,
    },
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
    /// Where its dropped scrapes are added up (a session's, over all its scrapers), and how
    /// many of them it added so far.
    drops: Option<(Arc<AtomicU64>, u64)>,
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
        Ok(Self::with_task(client::spawn(cfg, 64)?))
    }

    /// Collects from a scraper already started.
    #[must_use]
    pub fn with_task(task: ScrapeTask) -> Self {
        Self {
            task,
            builder: WindowBuilder::new(),
            last_error: None,
            drops: None,
        }
    }

    /// Adds the scrapes it drops to `total` (at every window and when it stops), so a
    /// session's count goes on growing after a scraper is gone.
    #[must_use]
    pub fn counting_drops_into(mut self, total: Arc<AtomicU64>) -> Self {
        self.drops = Some((total, 0));
        self.count_drops();
        self
    }

    /// Scrapes dropped so far because the channel was full (the consumer fell behind).
    #[must_use]
    pub fn dropped(&self) -> u64 {
        self.task.dropped()
    }

    fn count_drops(&mut self) {
        let now = self.task.dropped();
        if let Some((total, added)) = self.drops.as_mut() {
            total.fetch_add(now - *added, Ordering::Relaxed);
            *added = now;
        }
    }

    /// Fills `w.server` from the scrapes since the previous call.
    pub fn close_window(&mut self, w: &mut Window) {
        self.count_drops();
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
        self.count_drops();
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
        // Asked of the engine beside its metrics (SGLang, TGI, llama.cpp); vLLM says none.
        max_running: w.max_running,
        kv_usage: w.kv_usage.map(|g| g.max),
        preemptions_per_s: w.preemption_activity(),
        prefix_hit_rate: w.prefix_cache_hit_rate,
        prefix_queries: w.prefix_cache_queries,
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

/// NVML's view, joined to the servers: per window, each GPU a server's processes are on (see
/// [`gpus_of`]) folded over the window's samples ([`device_window`]), its memory used over
/// total, and the XIDs NVML reported on those GPUs.
pub struct NvmlCollector {
    task: NvmlTask,
    /// The newest sample's devices (a window without a new sample reads the latest state).
    devices: Vec<DeviceSample>,
}

impl NvmlCollector {
    /// Starts sampling; without an NVIDIA driver it only reports that.
    #[must_use]
    pub fn start(interval: Duration) -> Self {
        Self::with_task(nvml::spawn(&NvmlConfig {
            interval,
            capacity: 16,
            lib_path: None,
        }))
    }

    /// Collects from a sampler already started (NVML's, or one driven by a test double).
    #[must_use]
    pub fn with_task(task: NvmlTask) -> Self {
        Self {
            task,
            devices: Vec::new(),
        }
    }

    /// Whether a driver was found.
    #[must_use]
    pub fn status(&self) -> &GpuStatus {
        &self.task.status
    }

    /// NVML samples dropped so far because the sampler's channel was full.
    #[must_use]
    pub fn dropped(&self) -> u64 {
        self.task.dropped()
    }

    /// Fills each part's `gpu` from the samples since the previous call: `devices`,
    /// `mem_used_frac` ([`used_frac`]) and `xid_events`, on the GPUs its processes use.
    pub fn close_windows(&mut self, parts: &mut [Part<'_>]) {
        let mut samples: Vec<GpuSample> = Vec::new();
        if let Some(rx) = self.task.rx.as_mut() {
            while let Ok(s) = rx.try_recv() {
                samples.push(s);
            }
        }
        let before = samples
            .last()
            .map(|last| std::mem::replace(&mut self.devices, last.devices.clone()));
        for part in parts {
            let Some(mut g) = gpu_window(&samples, &self.devices, part.pids) else {
                continue;
            };
            if let Some(before) = &before {
                for d in &mut g.devices {
                    d.energy_j = energy_j(before, &samples, d.index);
                }
            }
            let gpu = part.window.gpu.get_or_insert_with(GpuSignals::default);
            gpu.mem_used_frac = g.mem_used_frac;
            gpu.devices = g.devices;
            gpu.xid_events.extend(g.xid_events);
        }
    }
}

/// One server's NVML signals over a window: `samples` are the window's (oldest first),
/// `latest` the newest devices seen (what a window without a sample reads), `pids` the
/// server's processes. Each GPU it uses ([`gpus_of`]) folded over the window
/// ([`device_window`]), memory used over total on them ([`used_frac`]), and the XIDs NVML
/// reported on them; `None` for a server on no GPU.
#[must_use]
pub fn gpu_window(
    samples: &[GpuSample],
    latest: &[DeviceSample],
    pids: &[u32],
) -> Option<GpuSignals> {
    let on = gpus_of(latest, pids);
    let devices: Vec<GpuDevice> = on
        .iter()
        .filter_map(|&i| {
            let seen: Vec<&DeviceSample> = samples
                .iter()
                .flat_map(|s| s.devices.iter().filter(|d| d.index == i))
                .collect();
            if seen.is_empty() {
                // No sample in this window: the latest state, from no new sample.
                let newest = latest.iter().find(|d| d.index == i)?;
                Some(GpuDevice {
                    samples: 0,
                    ..device_window(&[newest])
                })
            } else {
                Some(device_window(&seen))
            }
        })
        .collect();
    let xid_events: Vec<XidEvent> = samples
        .iter()
        .flat_map(|s| s.xids.iter().map(move |x| (s.at, x)))
        .filter(|(_, x)| x.device.is_none_or(|d| on.contains(&d)))
        .map(|(at, x)| XidEvent {
            unix_ms: at
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            code: x.code,
            gpu: x.device,
            source: XidSource::Nvml,
        })
        .collect();
    let mem_used_frac = used_frac(latest, pids);
    (mem_used_frac.is_some() || !devices.is_empty() || !xid_events.is_empty()).then(|| GpuSignals {
        mem_used_frac,
        devices,
        xid_events,
        ..GpuSignals::default()
    })
}

/// Joules GPU `index` used since the newest sample of the previous window (`before`): the
/// difference of NVML's energy counter to the window's newest sample; `None` without a counter
/// (a GPU older than Volta, or no sample before).
fn energy_j(before: &[DeviceSample], samples: &[GpuSample], index: u32) -> Option<f64> {
    let at = |devices: &[DeviceSample]| {
        devices
            .iter()
            .find(|d| d.index == index)
            .and_then(|d| d.energy_mj)
    };
    let from = at(before)?;
    let to = samples.iter().rev().find_map(|s| at(&s.devices))?;
    Some(to.saturating_sub(from) as f64 / 1e3)
}

/// The indices of the GPUs NVML lists one of `pids` on; every GPU when NVML lists no process
/// anywhere (it cannot see them from some containers), so the node's GPUs are joined to every
/// server then.
#[must_use]
pub fn gpus_of(devices: &[DeviceSample], pids: &[u32]) -> Vec<u32> {
    let any_listed = devices.iter().any(|d| !d.processes.is_empty());
    devices
        .iter()
        .filter(|d| !any_listed || d.processes.iter().any(|p| pids.contains(&p.pid)))
        .map(|d| d.index)
        .collect()
}

/// Memory used over total on the GPUs a server uses ([`gpus_of`]); `None` for a server on no
/// GPU.
#[must_use]
pub fn used_frac(devices: &[DeviceSample], pids: &[u32]) -> Option<f64> {
    let on = gpus_of(devices, pids);
    let (used, total) =
        devices
            .iter()
            .filter(|d| on.contains(&d.index))
            .fold((0u64, 0u64), |(u, t), d| {
                (
                    u + d.memory_used_bytes.unwrap_or(0),
                    t + d.memory_total_bytes.unwrap_or(0),
                )
            });
    (total > 0).then(|| used as f64 / total as f64)
}

/// One GPU over a window from its samples (oldest first, at least one): memory, power limit
/// and processes as last sampled; utilisations, power, SM clock and `PCIe` throughput as means
/// of the samples that had them; every throttle reason seen; the share of samples with a
/// power or thermal slowdown.
#[must_use]
pub fn device_window(seen: &[&DeviceSample]) -> GpuDevice {
    fn mean(v: impl Iterator<Item = f64>) -> Option<f64> {
        let (sum, n) = v.fold((0.0, 0u32), |(s, n), x| (s + x, n + 1));
        (n > 0).then(|| sum / f64::from(n))
    }
    let last = |f: fn(&DeviceSample) -> Option<u64>| seen.iter().rev().find_map(|d| f(d));
    let mut reasons: Vec<ClockEventReason> = seen
        .iter()
        .filter_map(|d| d.clock_event_reasons)
        .flat_map(ClockEventReasons::reasons)
        .collect();
    reasons.sort_unstable();
    reasons.dedup();
    let with_reasons: Vec<ClockEventReasons> =
        seen.iter().filter_map(|d| d.clock_event_reasons).collect();
    let slowed = with_reasons.iter().filter(|r| r.is_slowed_down()).count();
    let newest = seen.last();
    GpuDevice {
        index: newest.map_or(0, |d| d.index),
        uuid: newest.and_then(|d| d.uuid.clone()),
        samples: seen.len() as u32,
        memory_used_bytes: last(|d| d.memory_used_bytes),
        memory_reserved_bytes: last(|d| d.memory_reserved_bytes),
        memory_total_bytes: last(|d| d.memory_total_bytes),
        sm_util_percent: mean(
            seen.iter()
                .filter_map(|d| d.gpu_util_percent)
                .map(f64::from),
        ),
        mem_bw_util_percent: mean(
            seen.iter()
                .filter_map(|d| d.memory_util_percent)
                .map(f64::from),
        ),
        power_w: mean(
            seen.iter()
                .filter_map(|d| d.power_mw)
                .map(|mw| f64::from(mw) / 1e3),
        ),
        power_limit_w: last(|d| d.power_limit_mw.map(u64::from)).map(|mw| mw as f64 / 1e3),
        // Across windows: `NvmlCollector::close_windows` fills it.
        energy_j: None,
        sm_clock_mhz: mean(seen.iter().filter_map(|d| d.sm_clock_mhz).map(f64::from)),
        throttle_reasons: reasons,
        throttle_share: (!with_reasons.is_empty())
            .then(|| slowed as f64 / with_reasons.len() as f64),
        pcie_tx_bytes_per_s: mean(
            seen.iter()
                .filter_map(|d| d.pcie_tx_kbps)
                .map(|k| f64::from(k) * 1e3),
        ),
        pcie_rx_bytes_per_s: mean(
            seen.iter()
                .filter_map(|d| d.pcie_rx_kbps)
                .map(|k| f64::from(k) * 1e3),
        ),
        processes: newest
            .map(|d| {
                d.processes
                    .iter()
                    .map(|p| GpuProcessUse {
                        pid: p.pid,
                        used_bytes: p.used_bytes,
                    })
                    .collect()
            })
            .unwrap_or_default(),
    }
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
            memory_reserved_bytes: None,
            memory_total_bytes: Some(100),
            gpu_util_percent: None,
            memory_util_percent: None,
            sm_clock_mhz: None,
            power_mw: None,
            power_limit_mw: None,
            energy_mj: None,
            pcie_tx_kbps: None,
            pcie_rx_kbps: None,
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

    /// A collector sampling `double` every millisecond.
    fn collector(double: crate::gpu::nvml_double::NvmlTestDouble) -> NvmlCollector {
        use crate::gpu::nvml::{NvmlConfig, spawn_source};
        let status = double.status();
        let config = NvmlConfig {
            interval: Duration::from_millis(1),
            capacity: 1024,
            lib_path: None,
        };
        NvmlCollector::with_task(spawn_source(double, status, &config))
    }

    /// Through the NVML test double: a trace that goes healthy -> power-capped -> thermal ->
    /// an XID reaches the server's window as each GPU's fields folded over the window, the
    /// throttle reasons seen, the share of throttled samples, the processes, and the XID as an
    /// event; a GPU the server is not on is left out.
    #[test]
    fn nvml_collector_folds_each_gpu_through_the_test_double() {
        use crate::collect::timeline::Window;
        use crate::gpu::nvml::ClockEventReason;
        use crate::gpu::nvml_double::{
            NvmlTestDouble, healthy, power_capped, thermal, tick, tick_with_xid,
        };
        let other = |s: DeviceSample| DeviceSample { index: 1, ..s };
        let trace = vec![
            tick(vec![healthy(0, &[10]), other(healthy(1, &[99]))]),
            tick(vec![power_capped(0, &[10]), other(healthy(1, &[99]))]),
            tick(vec![thermal(0, &[10]), other(healthy(1, &[99]))]),
            tick_with_xid(vec![thermal(0, &[10]), other(healthy(1, &[99]))], 0, 79),
        ];
        let double = NvmlTestDouble::new(trace);
        let mut c = collector(double);
        // Let the double play its trace (it repeats the last tick afterwards).
        std::thread::sleep(Duration::from_millis(60));
        let mut w = Window::default();
        c.close_windows(&mut [Part {
            pids: &[10],
            window: &mut w,
        }]);
        let g = w.gpu.expect("the server's GPU signals");
        assert_eq!(g.devices.len(), 1, "only the GPU the server is on: {g:#?}");
        let d = &g.devices[0];
        assert_eq!(d.index, 0);
        assert!(d.samples >= 4, "{d:#?}");
        assert_eq!(
            d.throttle_reasons,
            [
                ClockEventReason::SwPowerCap,
                ClockEventReason::SwThermal,
                ClockEventReason::HwThermal
            ]
        );
        // Only the first sample was not slowed down.
        let share = d.throttle_share.unwrap();
        assert!(share > 0.5 && share < 1.0, "{share}");
        assert_eq!(d.memory_total_bytes, Some(80 << 30));
        assert_eq!(d.memory_reserved_bytes, Some(1 << 29));
        assert_eq!(d.power_limit_w, Some(700.0));
        assert!(d.sm_clock_mhz.unwrap() < 1980.0);
        assert!(d.pcie_rx_bytes_per_s.unwrap() > 0.0 && d.pcie_tx_bytes_per_s.unwrap() > 0.0);
        assert_eq!(d.processes.iter().map(|p| p.pid).collect::<Vec<_>>(), [10]);
        assert!(
            g.xid_events
                .iter()
                .all(|x| x.code == Some(79) && x.gpu == Some(0) && x.source == XidSource::Nvml),
            "{:?}",
            g.xid_events
        );
        assert!(!g.xid_events.is_empty());
        assert_eq!(g.mem_used_frac, Some(0.5));
        assert_eq!(c.dropped(), 0);
    }

    /// NVML's energy counter through the test double (each tick adds its power over a second):
    /// the first window has no reading before it, the second the counter's difference since
    /// the first window's newest sample, its samples times 420 J (the thermal state's 420 W).
    #[test]
    fn each_window_carries_the_joules_its_gpu_used() {
        use crate::collect::timeline::Window;
        use crate::gpu::nvml_double::{NvmlTestDouble, thermal, tick};
        let double = NvmlTestDouble::new(vec![tick(vec![thermal(0, &[10])])]);
        let mut c = collector(double);
        let mut close = || {
            std::thread::sleep(Duration::from_millis(30));
            let mut w = Window::default();
            c.close_windows(&mut [Part {
                pids: &[10],
                window: &mut w,
            }]);
            w.gpu.expect("the server's GPU").devices.remove(0)
        };
        let first = close();
        assert_eq!(first.energy_j, None, "no reading before the first window");
        let second = close();
        assert!(second.samples > 0);
        assert_eq!(second.energy_j, Some(f64::from(second.samples) * 420.0));
    }

    /// Means over the samples, the last sample's gauges, every reason seen.
    #[test]
    fn a_device_window_folds_its_samples() {
        use crate::gpu::nvml_double::{healthy, power_capped};
        let (a, b) = (healthy(0, &[1]), power_capped(0, &[1]));
        let d = device_window(&[&a, &b]);
        assert_eq!(d.samples, 2);
        assert_eq!(d.sm_clock_mhz, Some(f64::midpoint(1980.0, 1410.0)));
        assert_eq!(d.power_w, Some(f64::midpoint(350.0, 699.0)));
        assert_eq!(d.sm_util_percent, Some(80.0));
        assert_eq!(d.mem_bw_util_percent, Some(30.0));
        assert_eq!(d.throttle_share, Some(0.5));
        assert_eq!(d.pcie_rx_bytes_per_s, Some(8e6));
    }

    /// A consumer that falls behind makes the scraper drop scrapes; the collector adds them to
    /// the session's count, which keeps them after the scraper is gone.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_full_channel_drops_scrapes_and_the_session_counts_them() {
        use crate::scrape::client::{self, ScrapeConfig};
        // A port nobody listens on: every scrape fails fast, and a failed scrape is sent too.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut cfg = ScrapeConfig::new(format!("http://127.0.0.1:{port}/metrics"));
        cfg.interval = Duration::from_millis(5);
        let total = Arc::new(AtomicU64::new(0));
        let c = ServerCollector::with_task(client::spawn(cfg, 1).unwrap())
            .counting_drops_into(Arc::clone(&total));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while c.dropped() < 3 && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let dropped = c.dropped();
        assert!(dropped >= 3, "dropped {dropped}");
        drop(c);
        assert!(total.load(Ordering::Relaxed) >= dropped);
    }

    /// NVML's and the scrapers' drops are exported in the one drop family.
    #[test]
    fn nvml_and_scrape_drops_are_exported() {
        use crate::collect::kernel::Losses;
        use crate::export::prometheus::{DropCounter, Snapshot, render};
        let losses = Losses {
            nvml: 3,
            scrape: 2,
            ..Losses::default()
        };
        let drops: Vec<DropCounter> = losses
            .labelled()
            .into_iter()
            .map(DropCounter::from)
            .collect();
        let text = render(&Snapshot {
            series: &[],
            probes: &[],
            drops: &drops,
        });
        assert!(
            text.contains("inferscope_dropped_total{stage=\"nvml\",what=\"samples\"} 3\n"),
            "{text}"
        );
        assert!(
            text.contains("inferscope_dropped_total{stage=\"scrape\",what=\"scrapes\"} 2\n"),
            "{text}"
        );
        assert_eq!(text.matches("# TYPE inferscope_dropped_total").count(), 1);
    }
}

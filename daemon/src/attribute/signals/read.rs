//! How each signal is read from one window, without the baseline.

use super::signal::Signal;
use crate::collect::timeline::Window;
use crate::measure::Endpoint;

/// Windows at the start of the run in which GPU allocations are expected (warm-up).
pub const WARMUP_WINDOWS: usize = 3;

impl Signal {
    /// The signal's value in one window, without the baseline (`None` when absent).
    #[must_use]
    pub fn raw(self, w: &Window, index: usize) -> Option<f64> {
        use Signal as S;
        let load = w.load.as_ref();
        let server = w.server.as_ref();
        let net = w.net.as_ref();
        let gpu = w.gpu.as_ref();
        match self {
            S::TtftP50Ms => load?.ttft_ms.map(|q| q.p50),
            S::TtftP95Ms => load?.ttft_ms.map(|q| q.p95),
            S::TtftP99Ms => load?.ttft_ms.map(|q| q.p99),
            S::ItlP99Ms => load?.itl_ms.map(|q| q.p99),
            S::E2eP50Ms => load?.e2e_ms.map(|q| q.p50),
            S::E2eP99Ms => load?.e2e_ms.map(|q| q.p99),
            S::RecallMean => load?.recall_mean,
            S::DuplicatePrefillShare => duplicates_beyond_chance(load?),
            S::VectorShare => vector_share(w),
            S::PhaseEvents => Some(load?.phase_events_before as f64),
            S::ErrorRate => load
                .filter(|l| l.requests > 0)
                .map(|l| l.errors as f64 / l.requests as f64),
            S::AchievedShareOfTarget => {
                let l = load?;
                l.target_rps
                    .filter(|t| *t > 0.0)
                    .map(|t| l.achieved_rps / t)
            }
            S::SendLagP50Ms => load?.send_lag_ms.map(|q| q.p50),
            S::SendLagP95Ms => load?.send_lag_ms.map(|q| q.p95),
            S::UnsentArrivals => load?.unsent.map(|n| n as f64),
            // The generator's run-queue is watched only when its own pid is; samples may be 0.
            S::LoadgenRunqP99Us => w.runq.as_ref()?.loadgen_p99_us,
            S::Waiting => server?.waiting,
            S::RunningShareOfCap => {
                let s = server?;
                Some(s.running? / s.max_running.filter(|m| *m > 0.0)?)
            }
            S::KvUsage => server?.kv_usage,
            S::PreemptionsPerS => server?.preemptions_per_s,
            S::QueueTimeP50Ms => server?.queue_time_p50_ms,
            S::QueueTimeP95Ms => server?.queue_time_p95_ms,
            S::ServerTtftP50Ms => server?.ttft_p50_ms,
            S::PromptTokensPerRequest => {
                let rps = load?.achieved_rps;
                (rps > 0.0).then_some(())?;
                Some(server?.prompt_tokens_per_s? / rps)
            }
            S::PrefixHitRate => server?.prefix_hit_rate,
            S::QueueTimeMeanMs => server?.queue_time_mean_ms,
            S::ServerTtftMeanMs => server?.ttft_mean_ms,
            S::QueueShareOfTtft => {
                let s = server?;
                Some(s.queue_time_mean_ms? / s.ttft_mean_ms.filter(|t| *t > 0.0)?)
            }
            S::TtftRiseFromQueue | S::ServerWaitShare | S::TransitShareOfRise => None,
            S::ServerCpuPerRequestMs => {
                let n = net?.exchanges;
                (n > 0).then_some(())?;
                Some(w.runq.as_ref()?.oncpu_ms? / n as f64)
            }
            S::LossHitShare => {
                let n = net?;
                (n.joined_requests > 0)
                    .then(|| n.loss_hit_requests as f64 / n.joined_requests as f64)
            }
            S::LossSlowdown => {
                let n = net?;
                if n.joined_requests == 0 {
                    None
                } else if n.loss_hit_requests == 0 {
                    Some(1.0)
                } else {
                    Some(n.loss_hit_e2e_max_ms? / n.loss_clean_e2e_p50_ms?.max(0.001))
                }
            }
            S::RunqP99Us | S::RunqMeanUs | S::RunqTotalShare | S::RunqWaitShare => self.raw_runq(w),
            S::SrttMeanUs => net?.srtt_mean_us,
            S::Retransmits => net.map(|n| n.retrans as f64),
            S::KernelFirstTokenP50Ms => {
                joined_first_token_p50(w).or_else(|| net?.server_first_token_p50_ms)
            }
            S::KernelExchangeP50Ms => net?.exchange_p50_ms,
            S::KernelExchangeP99Ms => net?.exchange_p99_ms,
            S::IndexRebuild => server?.index_rebuild,
            S::ClientServerGapMs => net?.transit_p50_ms,
            S::ReadDelayMs => net?.read_delay_p50_ms,
            S::FrontendMs => Some(net?.server_first_token_p50_ms? - server?.ttft_p50_ms?),
            S::GpuOom => gpu.map(|g| g.oom as f64),
            S::GpuAllocsAfterWarmup => gpu.map(|g| {
                if index < WARMUP_WINDOWS {
                    0.0
                } else {
                    g.allocs as f64
                }
            }),
            S::GpuAllocChurn => gpu.map(|g| g.allocs.min(g.frees) as f64),
            S::GpuMemUsedFrac => gpu?.mem_used_frac,
            S::GpuThrottleShare | S::GpuSmClockMhz | S::GpuPowerShareOfCap | S::GpuXids => {
                self.raw_nvml(w)
            }
            // ItlP50Ms, InFlightMax, TtftPerItl, BatchMean, ServerTpotMs, EngineBusyShare,
            // GpuSyncPerLaunchMs.
            _ => self.raw_engine(w),
        }
    }

    /// The run-queue delay of the server's threads, in one window with samples.
    fn raw_runq(self, w: &Window) -> Option<f64> {
        use Signal as S;
        let r = w.runq.as_ref().filter(|r| r.samples > 0)?;
        match self {
            S::RunqP99Us => Some(r.p99_us),
            S::RunqMeanUs => Some(r.mean_us),
            S::RunqTotalShare => Some(r.total_ms / w.len_ms.max(1) as f64),
            S::RunqWaitShare => {
                let wanted = r.total_ms + r.oncpu_ms?;
                let others = r.total_ms - r.own_ms.unwrap_or(0.0);
                (wanted > 0.0).then(|| others.max(0.0) / wanted)
            }
            _ => None,
        }
    }

    /// The signals of an engine's steps and batch (`compute`), in one window.
    fn raw_engine(self, w: &Window) -> Option<f64> {
        use Signal as S;
        let load = w.load.as_ref();
        let gpu = w.gpu.as_ref();
        match self {
            S::ItlP50Ms => load?.itl_ms.map(|q| q.p50),
            S::InFlightMax => load
                .filter(|l| l.requests > 0)
                .map(|l| l.in_flight_max as f64),
            S::TtftPerItl => {
                let l = load?;
                Some(l.ttft_ms?.p50 / l.itl_ms?.p50.max(0.001))
            }
            S::BatchMean => w.server.as_ref()?.batch_mean,
            S::ServerTpotMs => w.server.as_ref()?.tpot_mean_ms,
            S::EngineBusyShare => {
                let oncpu = w.runq.as_ref()?.oncpu_ms?;
                let sync = gpu.map_or(0.0, |g| g.sync_ms);
                Some((oncpu + sync) / w.len_ms.max(1) as f64)
            }
            S::GpuSyncPerLaunchMs => {
                let g = gpu?;
                (g.launches > 0).then(|| g.sync_ms / g.launches as f64)
            }
            _ => None,
        }
    }

    /// The signals of the server's GPUs as NVML sampled them, in one window: over its GPUs,
    /// the worst one's (most throttled, slowest clock, nearest its power cap).
    fn raw_nvml(self, w: &Window) -> Option<f64> {
        use Signal as S;
        let g = w.gpu.as_ref()?;
        let worst = |f: fn(&crate::collect::timeline::GpuDevice) -> Option<f64>, max: bool| {
            g.devices
                .iter()
                .filter_map(f)
                .reduce(|a, b| if max == (b > a) { b } else { a })
        };
        match self {
            S::GpuThrottleShare => worst(|d| d.throttle_share, true),
            S::GpuSmClockMhz => worst(|d| d.sm_clock_mhz, false),
            S::GpuPowerShareOfCap => worst(
                |d| Some(d.power_w? / d.power_limit_w.filter(|l| *l > 0.0)?),
                true,
            ),
            // The kernel's count, or NVML's events when the tracepoint is absent.
            S::GpuXids => Some(g.xids.max(g.xid_events.len() as u64) as f64),
            _ => None,
        }
    }
}

/// 1 when most of the window's requests are vector searches, else 0; without load records,
/// the searches the server says it answered over the exchanges the kernel saw (the scraper's
/// own exchanges among them, a few per window).
fn vector_share(w: &Window) -> Option<f64> {
    if let Some(l) = w.load.as_ref() {
        return Some(f64::from(u8::from(l.endpoint? == Endpoint::VectorSearch)));
    }
    let searches = w.server.as_ref()?.vector_searches_per_s? * w.len_ms as f64 / 1000.0;
    // One of the window's exchanges was the scrape that read the search counter.
    let exchanges = w.net.as_ref()?.exchanges.saturating_sub(1) as f64;
    Some(if searches > 0.0 {
        (searches / exchanges.max(searches)).min(1.0)
    } else {
        0.0
    })
}

/// The kernel's request-in -> first token of the window's own requests (those joined with the
/// exchange the kernel saw), p50: of the load, not of every exchange on the port (a scraper's
/// 404s, health checks), and in the window the requests were sent in, as the client's latencies
/// are. `None` without joined requests (the node daemon beside another generator reads every
/// exchange instead).
fn joined_first_token_p50(w: &Window) -> Option<f64> {
    let v: Vec<f64> = w
        .requests
        .iter()
        .filter_map(|r| Some(r.kernel.as_ref()?.server_first_ms))
        .collect();
    crate::quantile::exact::median(&v)
}

/// The copies beyond what the workload's own sampling gives by chance.
fn duplicates_beyond_chance(l: &crate::collect::timeline::LoadSignals) -> Option<f64> {
    Some((l.duplicate_prefill_share? - l.duplicate_prefill_chance.unwrap_or(0.0)).max(0.0))
}

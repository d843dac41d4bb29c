//! Named signals read from a window, and the run's baseline of each.
//!
//! Rules refer to signals by name (`Signal`), so the rule table stays data: a signal knows how
//! to read itself from a `Window`, and why it may be absent.

use serde::{Deserialize, Serialize};

use crate::collect::timeline::Window;
use crate::measure::Endpoint;

/// Wake-ups on a request's path to its first token (frontend receive, engine step, response
/// write): each waits the server threads' mean run-queue delay, which is how the run-queue
/// delay is turned into milliseconds of a request.
pub const FIRST_TOKEN_WAKEUPS: f64 = 3.0;

/// Windows at the start of the run in which GPU allocations are expected (warm-up).
pub const WARMUP_WINDOWS: usize = 3;

/// A signal a rule can test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    /// Client TTFT p50, ms.
    TtftP50Ms,
    /// Client TTFT p95, ms.
    TtftP95Ms,
    /// Client TTFT p99, ms.
    TtftP99Ms,
    /// Client inter-token latency p99, ms.
    ItlP99Ms,
    /// Client end-to-end latency p50, ms.
    E2eP50Ms,
    /// Client end-to-end latency p99, ms.
    E2eP99Ms,
    /// Mean recall@k of sampled vector searches.
    RecallMean,
    /// 1 when most of the window's requests are vector searches, else 0. Without load
    /// records: the searches the server says it answered over the exchanges the kernel saw.
    VectorShare,
    /// Scenario events (e.g. an index rebuild) of the window's phase sent before its end.
    PhaseEvents,
    /// Failed / started requests.
    ErrorRate,
    /// Achieved / intended request rate (open loop only).
    AchievedShareOfTarget,
    /// Load generator send lag p50, ms.
    SendLagP50Ms,
    /// Load generator send lag p95, ms.
    SendLagP95Ms,
    /// Arrivals the schedule asked for in the window that the generator never sent
    /// (`LoadSignals::unsent`: it fell behind past the phase's end, or was stopped).
    UnsentArrivals,
    /// Load generator run-queue delay p99, µs.
    LoadgenRunqP99Us,
    /// Requests waiting in the server.
    Waiting,
    /// Running requests / the server's cap on them.
    RunningShareOfCap,
    /// KV-cache usage, 0..1.
    KvUsage,
    /// Preemptions (retractions) per second.
    PreemptionsPerS,
    /// Server queue time p50, ms.
    QueueTimeP50Ms,
    /// Server queue time p95, ms.
    QueueTimeP95Ms,
    /// Server mean queue time, ms (exact, unlike quantiles from vLLM's coarse buckets).
    QueueTimeMeanMs,
    /// Server TTFT p50 (server metric), ms.
    ServerTtftP50Ms,
    /// Server mean TTFT (server metric), ms.
    ServerTtftMeanMs,
    /// Prompt tokens per started request: rises under recompute after preemption.
    PromptTokensPerRequest,
    /// Prefix-cache hit rate, 0..1: falls when the cache evicts under pressure.
    PrefixHitRate,
    /// Server mean queue time / server mean TTFT: queueing dominates TTFT. Means, because
    /// queue time is part of TTFT request by request, so the share stays within 0..1 (vLLM's
    /// first queue-time bucket is 0-300 ms: a quantile inside it is no estimate of a few ms).
    QueueShareOfTtft,
    /// (mean queue time rise) / (server mean TTFT rise) over the baseline; 0 when TTFT did not
    /// rise.
    TtftRiseFromQueue,
    /// Server threads' run-queue delay p99, µs.
    RunqP99Us,
    /// Server threads' mean run-queue delay, µs.
    RunqMeanUs,
    /// Server threads' summed run-queue wait / window length.
    RunqTotalShare,
    /// Server threads' run-queue wait that another process (or an idle CPU out of their reach:
    /// a quota) ended / (all their wait + their on-CPU time): the share of the time they wanted
    /// a CPU that they spent waiting for one others held. Others taking its CPUs raise it; its
    /// own threads crowding each other (a busier engine) do not: that wait ends with one of
    /// its own threads handing over the CPU, and the probe counts it apart.
    RunqWaitShare,
    /// Mean smoothed RTT, µs.
    SrttMeanUs,
    /// Retransmitted segments in the window.
    Retransmits,
    /// Server-side first token (kernel: request in -> the first token's write) p50, ms.
    KernelFirstTokenP50Ms,
    /// Server-side whole exchange (kernel: request in -> last write) p50, ms.
    KernelExchangeP50Ms,
    /// Server-side whole exchange p99, ms: the slowest answers, timed by the kernel.
    KernelExchangeP99Ms,
    /// Index rebuild activity a vector service reports in the window (scrapes that found a
    /// rebuild running plus rebuilds completed); 0 when its index is idle.
    IndexRebuild,
    /// The server processes' on-CPU time per exchange the kernel saw, ms.
    ServerCpuPerRequestMs,
    /// Share of the server-side first-token rise over the baseline that neither CPU work per
    /// request nor run-queue delay accounts for: time requests waited inside the server
    /// (admission limit, busy worker pool, lock). 0 when the first token did not rise.
    ServerWaitShare,
    /// Share of the window's joined requests whose connection retransmitted while they were in
    /// flight (requests are folded by their start; the retransmit may come a window later).
    LossHitShare,
    /// The slowest E2E of the requests whose connection retransmitted while they were in flight
    /// / the E2E p50 of the other joined requests (of the baseline when every request was hit);
    /// 1 when none was hit.
    LossSlowdown,
    /// Client sent -> the server read the request, p50, ms: transit plus time the request
    /// waited unread (listen backlog, a socket no worker reads).
    ReadDelayMs,
    /// Client-seen TTFT minus the server's own first-token time, per request joined with the
    /// kernel's exchange by connection (request transit + first token transit), p50, ms.
    ClientServerGapMs,
    /// Of the client's TTFT p50 rise over the baseline, the share the client-server gap's rise
    /// accounts for: time on the wire and in socket queues. 0 when TTFT did not rise.
    TransitShareOfRise,
    /// Server-side first token (kernel) - the engine's own TTFT (server metric), p50, ms: time
    /// in the API server's frontend (HTTP, tokenisation, detokenisation), CPU-bound.
    FrontendMs,
    /// Allocation calls that returned out-of-memory.
    GpuOom,
    /// Successful allocation calls after warm-up (0 during warm-up).
    GpuAllocsAfterWarmup,
    /// min(allocs, frees): free-then-alloc churn (allocator retry).
    GpuAllocChurn,
    /// NVML device memory used / total.
    GpuMemUsedFrac,
    /// Client inter-token latency p50, ms: one engine step of a streaming sequence.
    ItlP50Ms,
    /// Most requests in flight at once (the load generator's concurrency).
    InFlightMax,
    /// Client TTFT p50 / ITL p50: the first token in engine steps. An engine that is only
    /// slower keeps it; requests that wait for admission raise it.
    TtftPerItl,
    /// Of the window's LLM requests, the share sent within one prefill of an identical one
    /// (`LoadSignals::duplicate_prefill_share`) beyond the share chance gives
    /// (`LoadSignals::duplicate_prefill_chance`).
    DuplicatePrefillShare,
    /// Mean sequences per engine step (the batch), from the server's metrics.
    BatchMean,
    /// The server's own mean time per output token of one sequence, ms.
    ServerTpotMs,
    /// Share of the window the serving process was busy: its on-CPU time plus host time
    /// blocked in GPU synchronisation, over the window (1 = one thread busy throughout).
    EngineBusyShare,
    /// Host time blocked in GPU synchronisation per kernel or graph launch, ms: the device
    /// time of one step when the engine launches and waits once per step.
    GpuSyncPerLaunchMs,
    /// Share of the window's NVML samples with a power or thermal slowdown (clock event
    /// reasons) on the server's GPUs, the most throttled GPU's, 0..1.
    GpuThrottleShare,
    /// The SM clock of the server's slowest GPU, MHz (window mean).
    GpuSmClockMhz,
    /// Power draw over the enforced power limit of the server's GPU nearest its cap, 0..1.
    GpuPowerShareOfCap,
    /// XID errors on the server's GPUs in the window (kernel tracepoint or NVML events).
    GpuXids,
}

/// Where a window's signal comes from, for naming what is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    /// The load generator's records.
    Load,
    /// The server's `/metrics`.
    Server,
    /// Scheduler probes.
    Runq,
    /// Socket probes.
    Net,
    /// CUDA uprobes / NVML.
    Gpu,
    /// Derived from the baseline.
    Baseline,
}

impl Signal {
    /// Every signal, in declaration order.
    pub const ALL: &'static [Signal] = &[
        Signal::TtftP50Ms,
        Signal::TtftP95Ms,
        Signal::TtftP99Ms,
        Signal::ItlP99Ms,
        Signal::E2eP50Ms,
        Signal::E2eP99Ms,
        Signal::RecallMean,
        Signal::VectorShare,
        Signal::PhaseEvents,
        Signal::ErrorRate,
        Signal::AchievedShareOfTarget,
        Signal::SendLagP50Ms,
        Signal::SendLagP95Ms,
        Signal::UnsentArrivals,
        Signal::LoadgenRunqP99Us,
        Signal::Waiting,
        Signal::RunningShareOfCap,
        Signal::KvUsage,
        Signal::PreemptionsPerS,
        Signal::QueueTimeP50Ms,
        Signal::QueueTimeP95Ms,
        Signal::QueueTimeMeanMs,
        Signal::ServerTtftP50Ms,
        Signal::ServerTtftMeanMs,
        Signal::PromptTokensPerRequest,
        Signal::PrefixHitRate,
        Signal::QueueShareOfTtft,
        Signal::TtftRiseFromQueue,
        Signal::RunqP99Us,
        Signal::RunqMeanUs,
        Signal::RunqTotalShare,
        Signal::RunqWaitShare,
        Signal::SrttMeanUs,
        Signal::Retransmits,
        Signal::KernelFirstTokenP50Ms,
        Signal::KernelExchangeP50Ms,
        Signal::KernelExchangeP99Ms,
        Signal::IndexRebuild,
        Signal::ServerCpuPerRequestMs,
        Signal::ServerWaitShare,
        Signal::LossHitShare,
        Signal::LossSlowdown,
        Signal::ReadDelayMs,
        Signal::ClientServerGapMs,
        Signal::TransitShareOfRise,
        Signal::FrontendMs,
        Signal::GpuOom,
        Signal::GpuAllocsAfterWarmup,
        Signal::GpuAllocChurn,
        Signal::GpuMemUsedFrac,
        Signal::ItlP50Ms,
        Signal::InFlightMax,
        Signal::TtftPerItl,
        Signal::DuplicatePrefillShare,
        Signal::BatchMean,
        Signal::ServerTpotMs,
        Signal::EngineBusyShare,
        Signal::GpuSyncPerLaunchMs,
        Signal::GpuThrottleShare,
        Signal::GpuSmClockMhz,
        Signal::GpuPowerShareOfCap,
        Signal::GpuXids,
    ];
}

impl Source {
    /// Why a signal of this source is absent, in words a user can act on.
    #[must_use]
    pub fn absent_reason(self) -> &'static str {
        match self {
            Source::Load => "no load generator data",
            Source::Server => "no server metrics (scrape off, or the server does not export it)",
            Source::Runq => "no run-queue data (kernel probes off: needs root)",
            Source::Net => "no socket data (kernel probes off: needs root)",
            Source::Gpu => "no GPU data (CUDA uprobes off or no NVML)",
            Source::Baseline => "no baseline for this signal",
        }
    }

    /// Why a signal of this source is absent from a window the source did report on.
    #[must_use]
    pub fn unreported_reason(self) -> &'static str {
        match self {
            Source::Load => {
                "no request of the window gave it (none answered, or none of that kind)"
            }
            Source::Server => "the server's metrics lack it (its engine does not export it)",
            Source::Runq => "the run-queue probes saw no wake-up for it",
            Source::Net => "the socket probes saw no exchange that gives it",
            Source::Gpu => "the GPU sources do not report it",
            Source::Baseline => "no baseline for this signal",
        }
    }
}

impl Signal {
    /// The name used in evidence.
    #[must_use]
    pub fn name(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    }

    /// Where the signal comes from.
    #[must_use]
    pub fn source(self) -> Source {
        use Signal as S;
        match self {
            S::TtftP50Ms
            | S::TtftP95Ms
            | S::TtftP99Ms
            | S::ItlP99Ms
            | S::E2eP50Ms
            | S::E2eP99Ms
            | S::RecallMean
            | S::VectorShare
            | S::PhaseEvents
            | S::ErrorRate
            | S::AchievedShareOfTarget
            | S::SendLagP50Ms
            | S::SendLagP95Ms
            | S::UnsentArrivals
            | S::ItlP50Ms
            | S::InFlightMax
            | S::TtftPerItl
            | S::DuplicatePrefillShare => Source::Load,
            S::Waiting
            | S::RunningShareOfCap
            | S::KvUsage
            | S::PreemptionsPerS
            | S::QueueTimeP50Ms
            | S::QueueTimeP95Ms
            | S::QueueTimeMeanMs
            | S::ServerTtftMeanMs
            | S::ServerTtftP50Ms
            | S::PromptTokensPerRequest
            | S::PrefixHitRate
            | S::QueueShareOfTtft
            | S::BatchMean
            | S::ServerTpotMs
            | S::IndexRebuild => Source::Server,
            S::TtftRiseFromQueue | S::ServerWaitShare | S::TransitShareOfRise => Source::Baseline,
            S::LoadgenRunqP99Us
            | S::RunqP99Us
            | S::RunqMeanUs
            | S::RunqTotalShare
            | S::RunqWaitShare
            | S::ServerCpuPerRequestMs
            | S::EngineBusyShare => Source::Runq,
            S::SrttMeanUs
            | S::Retransmits
            | S::KernelFirstTokenP50Ms
            | S::KernelExchangeP50Ms
            | S::KernelExchangeP99Ms
            | S::LossHitShare
            | S::LossSlowdown
            | S::ReadDelayMs
            | S::ClientServerGapMs
            | S::FrontendMs => Source::Net,
            S::GpuOom
            | S::GpuAllocsAfterWarmup
            | S::GpuAllocChurn
            | S::GpuMemUsedFrac
            | S::GpuSyncPerLaunchMs
            | S::GpuThrottleShare
            | S::GpuSmClockMhz
            | S::GpuPowerShareOfCap
            | S::GpuXids => Source::Gpu,
        }
    }

    /// Whether the signal can exist for requests of this kind: the timings of generated
    /// tokens (first token, inter-token, the first token's transit, the server's own TTFT and
    /// time per token) only for the generation endpoints, recall only for vector searches. A
    /// vector search or a plain HTTP request has no first token to time, so such a signal is
    /// not missing there.
    #[must_use]
    pub fn applies_to(self, endpoint: Endpoint) -> bool {
        use Signal as S;
        let token_timing = matches!(
            self,
            S::TtftP50Ms
                | S::TtftP95Ms
                | S::TtftP99Ms
                | S::ItlP50Ms
                | S::ItlP99Ms
                | S::TtftPerItl
                | S::DuplicatePrefillShare
                | S::ClientServerGapMs
                | S::TransitShareOfRise
                | S::ServerTtftP50Ms
                | S::ServerTtftMeanMs
                | S::ServerTpotMs
                | S::QueueShareOfTtft
                | S::TtftRiseFromQueue
                | S::FrontendMs
        );
        match endpoint {
            Endpoint::Chat | Endpoint::Completions => self != S::RecallMean,
            Endpoint::VectorSearch => !token_timing,
            Endpoint::Http => !token_timing && self != S::RecallMean,
        }
    }

    /// Whether the signal can exist in this window: see [`Self::applies_to`], for the kind of
    /// most of the window's requests (every signal applies when the window has none). A
    /// vector index's rebuild, and the kernel's exchange tail that judges it, belong to a
    /// vector service only: no engine's window lists them missing. The generator's run-queue
    /// belongs to windows with its requests. NVML's clocks and power belong to windows with a
    /// GPU NVML sampled.
    #[must_use]
    pub fn applies_in(self, w: &Window) -> bool {
        // Only a window with arrivals left unsent has the signal: elsewhere it is no part of
        // any rule (neither evidence nor missing).
        if self == Signal::UnsentArrivals {
            return w.load.as_ref().is_some_and(|l| l.unsent.is_some());
        }
        // The generator's own run-queue judges the windows of the requests it sent: a service
        // behind the target (`--service`) never heard from it.
        if self == Signal::LoadgenRunqP99Us {
            return w.load.is_some();
        }
        let endpoint = w.load.as_ref().and_then(|l| l.endpoint);
        if matches!(self, Signal::IndexRebuild | Signal::KernelExchangeP99Ms) {
            return match endpoint {
                Some(e) => e == Endpoint::VectorSearch,
                None => w
                    .server
                    .as_ref()
                    .and_then(|s| s.vector_searches_per_s)
                    .is_some_and(|r| r > 0.0),
            };
        }
        // NVML's view of the GPUs exists only where the server runs on one NVML sees: a server
        // on no GPU (or a node without the driver) has no clocks to be throttled.
        if matches!(
            self,
            Signal::GpuThrottleShare | Signal::GpuSmClockMhz | Signal::GpuPowerShareOfCap
        ) && w.gpu.as_ref().is_none_or(|g| g.devices.is_empty())
        {
            return false;
        }
        endpoint.is_none_or(|e| self.applies_to(e))
    }

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

    /// Why the signal is absent from this window: its source, or a field the source lacks.
    #[must_use]
    pub fn absent_reason(self, w: &Window) -> &'static str {
        let present = match self.source() {
            Source::Load => w.load.is_some(),
            Source::Server => w.server.is_some(),
            Source::Runq => w.runq.as_ref().is_some_and(|r| r.samples > 0),
            Source::Net => w.net.is_some(),
            Source::Gpu => w.gpu.is_some(),
            // A derived signal: name its missing inputs before blaming the baseline.
            Source::Baseline => {
                let inputs: &[Signal] = match self {
                    Signal::ServerWaitShare => &[Signal::KernelFirstTokenP50Ms],
                    Signal::TransitShareOfRise => &[Signal::ClientServerGapMs, Signal::TtftP50Ms],
                    _ => &[Signal::ServerTtftMeanMs, Signal::QueueTimeMeanMs],
                };
                return inputs
                    .iter()
                    .find(|s| s.raw(w, 0).is_none())
                    .map_or(Source::Baseline.absent_reason(), |s| s.absent_reason(w));
            }
        };
        if present {
            self.source().unreported_reason()
        } else {
            self.source().absent_reason()
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
    crate::collect::stats::median(&v)
}

/// The copies beyond what the workload's own sampling gives by chance.
fn duplicates_beyond_chance(l: &crate::collect::timeline::LoadSignals) -> Option<f64> {
    Some((l.duplicate_prefill_share? - l.duplicate_prefill_chance.unwrap_or(0.0)).max(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_timings_apply_to_generation_endpoints_only() {
        for s in [
            Signal::TtftP50Ms,
            Signal::ItlP99Ms,
            Signal::ClientServerGapMs,
            Signal::ServerTtftMeanMs,
        ] {
            assert!(s.applies_to(Endpoint::Chat) && s.applies_to(Endpoint::Completions));
            assert!(!s.applies_to(Endpoint::VectorSearch) && !s.applies_to(Endpoint::Http));
        }
        for s in [
            Signal::E2eP99Ms,
            Signal::KvUsage,
            Signal::KernelFirstTokenP50Ms,
        ] {
            assert!(s.applies_to(Endpoint::VectorSearch) && s.applies_to(Endpoint::Http));
        }
        assert!(Signal::RecallMean.applies_to(Endpoint::VectorSearch));
        assert!(!Signal::RecallMean.applies_to(Endpoint::Chat));
        // A window without load records applies every signal but the generator's run-queue:
        // a service behind the target never heard from the generator.
        assert!(Signal::TtftP50Ms.applies_in(&Window::default()));
        assert!(!Signal::LoadgenRunqP99Us.applies_in(&Window::default()));
        let with_load = Window {
            load: Some(crate::collect::timeline::LoadSignals::default()),
            ..Window::default()
        };
        assert!(Signal::LoadgenRunqP99Us.applies_in(&with_load));
    }
}

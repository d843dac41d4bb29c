//! The signals a rule can test, every one by its name.

use serde::{Deserialize, Serialize};

/// Wake-ups on a request's path to its first token (frontend receive, engine step, response
/// write): each waits the server threads' mean run-queue delay, which is how the run-queue
/// delay is turned into milliseconds of a request.
pub const FIRST_TOKEN_WAKEUPS: f64 = 3.0;

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

impl Signal {
    /// The name used in evidence.
    #[must_use]
    pub fn name(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    }
}

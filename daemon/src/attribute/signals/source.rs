//! Where a signal comes from, and why it is absent from a window.

use super::signal::Signal;
use crate::collect::timeline::Window;

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

//! Which signals can exist for a kind of request, and in a window.

use super::signal::Signal;
use super::source::Source;
use crate::collect::timeline::Window;
use crate::measure::Endpoint;

impl Signal {
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
        // The engine's metrics (its admission queue, KV cache, batch, its own timings) are of
        // generation requests, never of a vector search (a server that does both answers
        // searches beside them); of a server's metrics a search has its index's.
        let engine = self.source() == Source::Server && self != S::IndexRebuild;
        match endpoint {
            Endpoint::Chat | Endpoint::Completions => self != S::RecallMean,
            Endpoint::VectorSearch => !token_timing && !engine,
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
        // Recall is the client's measure of its own searches: no other window has it.
        if self == Signal::RecallMean {
            return endpoint == Some(Endpoint::VectorSearch);
        }
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
        for s in [Signal::E2eP99Ms, Signal::KernelFirstTokenP50Ms] {
            assert!(s.applies_to(Endpoint::VectorSearch) && s.applies_to(Endpoint::Http));
        }
        // The engine's queue and cache hold generation requests, never a vector search.
        for s in [Signal::KvUsage, Signal::Waiting, Signal::QueueTimeP95Ms] {
            assert!(!s.applies_to(Endpoint::VectorSearch) && s.applies_to(Endpoint::Http));
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

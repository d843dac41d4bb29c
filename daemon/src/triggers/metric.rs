//! What a trigger condition can look at: every attribution [`Signal`] of a window plus a few
//! raw fields of the time line the signals do not name (p95s, counts), each with its unit.

use std::fmt;

use crate::attribute::Signal;
use crate::collect::timeline::Window;

/// A window field that is not an attribution signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Extra {
    /// Client inter-token latency p50, ms.
    ItlP50Ms,
    /// Client inter-token latency p95, ms.
    ItlP95Ms,
    /// Client end-to-end latency p95, ms.
    E2eP95Ms,
    /// Requests the load generator started (or, live, finished) in the window.
    Requests,
    /// Of those, failed.
    Errors,
    /// Achieved request rate, requests/s.
    AchievedRps,
    /// Output tokens per second.
    OutputTokensPerS,
    /// Most requests in flight at once.
    InFlightMax,
    /// Requests running in the server (its metric).
    Running,
    /// Server-reported TTFT p95, ms.
    ServerTtftP95Ms,
    /// Kernel server-side first token p95, ms.
    KernelFirstTokenP95Ms,
    /// Kernel whole exchange p99, ms.
    KernelExchangeP99Ms,
    /// Connect latency p99, ms.
    ConnectP99Ms,
    /// Largest smoothed RTT, µs.
    SrttMaxUs,
    /// GPU XID errors.
    GpuXids,
    /// Device bytes the server holds.
    GpuLiveBytes,
    /// Host time blocked in GPU synchronisation, ms.
    GpuSyncMs,
}

impl Extra {
    const ALL: [(Extra, &'static str); 17] = [
        (Extra::ItlP50Ms, "itl_p50_ms"),
        (Extra::ItlP95Ms, "itl_p95_ms"),
        (Extra::E2eP95Ms, "e2e_p95_ms"),
        (Extra::Requests, "requests"),
        (Extra::Errors, "errors"),
        (Extra::AchievedRps, "achieved_rps"),
        (Extra::OutputTokensPerS, "output_tokens_per_s"),
        (Extra::InFlightMax, "in_flight_max"),
        (Extra::Running, "running"),
        (Extra::ServerTtftP95Ms, "server_ttft_p95_ms"),
        (Extra::KernelFirstTokenP95Ms, "kernel_first_token_p95_ms"),
        (Extra::KernelExchangeP99Ms, "kernel_exchange_p99_ms"),
        (Extra::ConnectP99Ms, "connect_p99_ms"),
        (Extra::SrttMaxUs, "srtt_max_us"),
        (Extra::GpuXids, "gpu_xids"),
        (Extra::GpuLiveBytes, "gpu_live_bytes"),
        (Extra::GpuSyncMs, "gpu_sync_ms"),
    ];

    fn read(self, w: &Window) -> Option<f64> {
        let load = w.load.as_ref();
        let net = w.net.as_ref();
        let gpu = w.gpu.as_ref();
        match self {
            Extra::ItlP50Ms => load?.itl_ms.map(|q| q.p50),
            Extra::ItlP95Ms => load?.itl_ms.map(|q| q.p95),
            Extra::E2eP95Ms => load?.e2e_ms.map(|q| q.p95),
            Extra::Requests => load.map(|l| l.requests as f64),
            Extra::Errors => load.map(|l| l.errors as f64),
            Extra::AchievedRps => load.map(|l| l.achieved_rps),
            Extra::OutputTokensPerS => load.map(|l| l.output_tokens_per_s),
            Extra::InFlightMax => load.map(|l| l.in_flight_max as f64),
            Extra::Running => w.server.as_ref()?.running,
            Extra::ServerTtftP95Ms => w.server.as_ref()?.ttft_p95_ms,
            Extra::KernelFirstTokenP95Ms => net?.server_first_token_p95_ms,
            Extra::KernelExchangeP99Ms => net?.exchange_p99_ms,
            Extra::ConnectP99Ms => net?.connect_p99_ms,
            Extra::SrttMaxUs => net?.srtt_max_us,
            Extra::GpuXids => gpu.map(|g| g.xids as f64),
            Extra::GpuLiveBytes => gpu.map(|g| g.live_bytes as f64),
            Extra::GpuSyncMs => gpu.map(|g| g.sync_ms),
        }
    }
}

/// A metric a condition compares: an attribution signal or an [`Extra`] field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Metric {
    /// One of the attribution's signals (`kv_usage`, `ttft_p95_ms`, `runq_p99_us`, ...).
    Signal(Signal),
    /// A raw time-line field.
    Extra(Extra),
    /// The verdict's confidence, 0..1.
    VerdictConfidence,
}

/// The unit a metric is compared in; thresholds are converted to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Milliseconds: thresholds are durations (`300ms`, `1.5s`) or plain numbers of ms.
    Ms,
    /// Microseconds: thresholds are durations or plain numbers of µs.
    Us,
    /// A fraction 0..1: thresholds are `5%` or `0.05`.
    Ratio,
    /// A plain number (count, rate, bytes).
    Number,
}

impl Metric {
    /// The metric called `name`: a signal's or extra field's name, with or without its unit
    /// suffix (`ttft_p95` is `ttft_p95_ms`) or `_mean` (`recall` is `recall_mean`).
    #[must_use]
    pub fn parse(name: &str) -> Option<Self> {
        if name == "verdict_confidence" {
            return Some(Metric::VerdictConfidence);
        }
        let exact = |n: &str| {
            Signal::ALL
                .iter()
                .find(|s| s.name() == n)
                .map(|s| Metric::Signal(*s))
                .or_else(|| {
                    Extra::ALL
                        .iter()
                        .find(|(_, e)| *e == n)
                        .map(|(x, _)| Metric::Extra(*x))
                })
        };
        exact(name)
            .or_else(|| exact(&format!("{name}_ms")))
            .or_else(|| exact(&format!("{name}_us")))
            .or_else(|| exact(&format!("{name}_mean")))
    }

    /// Every metric name, for error messages.
    #[must_use]
    pub fn names() -> Vec<String> {
        let mut v: Vec<String> = Signal::ALL.iter().map(|s| s.name()).collect();
        v.extend(Extra::ALL.iter().map(|(_, n)| (*n).to_owned()));
        v.push("verdict_confidence".into());
        v
    }

    /// The canonical name (with its unit suffix).
    #[must_use]
    pub fn name(self) -> String {
        match self {
            Metric::Signal(s) => s.name(),
            Metric::Extra(x) => Extra::ALL
                .iter()
                .find(|(e, _)| *e == x)
                .map(|(_, n)| (*n).to_owned())
                .unwrap_or_default(),
            Metric::VerdictConfidence => "verdict_confidence".into(),
        }
    }

    /// The unit it is compared in.
    #[must_use]
    pub fn unit(self) -> Unit {
        let name = self.name();
        if name.ends_with("_ms") {
            Unit::Ms
        } else if name.ends_with("_us") {
            Unit::Us
        } else if matches!(
            self,
            Metric::VerdictConfidence
                | Metric::Signal(
                    Signal::ErrorRate
                        | Signal::KvUsage
                        | Signal::PrefixHitRate
                        | Signal::RecallMean
                        | Signal::GpuMemUsedFrac
                        | Signal::RunningShareOfCap
                        | Signal::LossHitShare
                        | Signal::AchievedShareOfTarget
                        | Signal::RunqTotalShare
                        | Signal::RunqWaitShare
                        | Signal::QueueShareOfTtft
                        | Signal::TtftRiseFromQueue
                        | Signal::ServerWaitShare
                        | Signal::TransitShareOfRise
                )
        ) {
            Unit::Ratio
        } else {
            Unit::Number
        }
    }

    /// Its value in window `w` (index `index` of its time line), `None` when the window lacks
    /// it. Signals derived from the attribution's baseline (`ttft_rise_from_queue`,
    /// `server_wait_share`, `transit_share_of_rise`) are absent here: use `rises_by` on their inputs instead.
    #[must_use]
    pub fn read(self, w: &Window, index: usize, confidence: f64) -> Option<f64> {
        match self {
            Metric::Signal(s) => s.raw(w, index),
            Metric::Extra(x) => x.read(w),
            Metric::VerdictConfidence => Some(confidence),
        }
        .filter(|v| v.is_finite())
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::timeline::{LoadSignals, Quantiles, ServerSignals};

    #[test]
    fn names_resolve_with_or_without_the_unit() {
        assert_eq!(
            Metric::parse("ttft_p95"),
            Some(Metric::Signal(Signal::TtftP95Ms))
        );
        assert_eq!(
            Metric::parse("ttft_p95_ms"),
            Some(Metric::Signal(Signal::TtftP95Ms))
        );
        assert_eq!(
            Metric::parse("runq_p99"),
            Some(Metric::Signal(Signal::RunqP99Us))
        );
        assert_eq!(
            Metric::parse("server_ttft_p95"),
            Some(Metric::Extra(Extra::ServerTtftP95Ms))
        );
        assert_eq!(Metric::parse("nonsense"), None);
        assert_eq!(Metric::parse("kv_usage").unwrap().unit(), Unit::Ratio);
        assert_eq!(Metric::parse("retransmits").unwrap().unit(), Unit::Number);
        assert_eq!(Metric::parse("e2e_p95").unwrap().unit(), Unit::Ms);
        assert!(Metric::names().iter().all(|n| Metric::parse(n).is_some()));
    }

    #[test]
    fn values_are_read_from_the_window() {
        let w = Window {
            load: Some(LoadSignals {
                requests: 20,
                errors: 2,
                ttft_ms: Some(Quantiles {
                    p50: 10.0,
                    p95: 40.0,
                    p99: 50.0,
                    max: 60.0,
                }),
                ..LoadSignals::default()
            }),
            server: Some(ServerSignals {
                kv_usage: Some(0.97),
                ..ServerSignals::default()
            }),
            ..Window::default()
        };
        let read = |n: &str| Metric::parse(n).unwrap().read(&w, 0, 0.8);
        assert_eq!(read("ttft_p95"), Some(40.0));
        assert_eq!(read("error_rate"), Some(0.1));
        assert_eq!(read("kv_usage"), Some(0.97));
        assert_eq!(read("requests"), Some(20.0));
        assert_eq!(read("verdict_confidence"), Some(0.8));
        assert_eq!(read("runq_p99"), None);
    }
}

//! Host-bound or GPU-bound: what a `compute` phase's step loop waits on. An engine's steps
//! slow either because the GPU is busy throughout (a saturated device: a faster GPU, a smaller
//! model or fewer sequences per step help) or because the GPU waits for the host between
//! kernels: its scheduling thread runs a whole CPU while the SMs sit idle much of the time (on
//! an H200, one scheduler thread on a CPU 1,030 ms per second while the SMs were 22-26% busy).
//! That is a different fix: CUDA graphs, a faster scheduler, bigger batches per step. Read
//! from the serving process's busiest thread (procfs, `RunqSignals::busiest_thread_ms`), the
//! SMs' busy share (NVML) and the host time blocked in GPU synchronisation (uprobes).

use serde::{Deserialize, Serialize};

use crate::collect::timeline::Window;
use crate::quantile::exact::median;

/// A thread on a CPU this share of the time runs a loop the host bounds.
const HOST_THREAD_BUSY: f64 = 0.9;
/// SMs busy under this share of the time are waiting for work.
const SM_IDLE_BELOW: f64 = 50.0;
/// SMs busy at least this share of the time are the step's limit.
const SM_BUSY_AT: f64 = 80.0;

/// Which side of the launch the step loop waits on, with what was read (medians over the
/// phase's windows).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case", tag = "bound")]
pub enum Bound {
    /// The GPU waits for the host: the busiest serving thread near a whole CPU, the SMs idle
    /// much of the time.
    Host {
        /// The busiest thread's on-CPU share of the window.
        thread_busy: f64,
        /// The SMs' busy share, percent (NVML).
        sm_busy_percent: f64,
        /// Host time blocked in GPU synchronisation, share of the window.
        sync_share: Option<f64>,
    },
    /// The GPU is the limit: its SMs busy nearly throughout.
    Gpu {
        /// The SMs' busy share, percent (NVML).
        sm_busy_percent: f64,
        /// The busiest thread's on-CPU share of the window, when read.
        thread_busy: Option<f64>,
    },
}

impl Bound {
    /// What the phase's windows show; `None` without NVML's SM busy share, or between the two
    /// (neither side clearly the limit).
    #[must_use]
    pub fn of(windows: &[&Window]) -> Option<Self> {
        let len_s = |w: &Window| w.len_ms.max(1) as f64;
        let sm = median(
            &windows
                .iter()
                .filter_map(|w| {
                    let devices = &w.gpu.as_ref()?.devices;
                    devices
                        .iter()
                        .filter_map(|d| d.sm_util_percent)
                        .reduce(f64::max)
                })
                .collect::<Vec<_>>(),
        )?;
        let thread = median(
            &windows
                .iter()
                .filter_map(|w| Some(w.runq.as_ref()?.busiest_thread_ms? / len_s(w)))
                .collect::<Vec<_>>(),
        );
        let sync = median(
            &windows
                .iter()
                .filter_map(|w| Some(w.gpu.as_ref()?.sync_ms / len_s(w)))
                .collect::<Vec<_>>(),
        );
        match thread {
            Some(t) if t >= HOST_THREAD_BUSY && sm < SM_IDLE_BELOW => Some(Self::Host {
                thread_busy: t,
                sm_busy_percent: sm,
                sync_share: sync,
            }),
            _ if sm >= SM_BUSY_AT => Some(Self::Gpu {
                sm_busy_percent: sm,
                thread_busy: thread,
            }),
            _ => None,
        }
    }

    /// The sentence the `compute` advice leads with.
    #[must_use]
    pub fn line(&self) -> String {
        match self {
            Self::Host {
                thread_busy,
                sm_busy_percent,
                ..
            } => format!(
                "host-bound: the GPU waits for the host (the serving process's busiest thread on a \
                 CPU {:.0}% of the time, the SMs busy {sm_busy_percent:.0}%): capture the steps \
                 in CUDA graphs, make the scheduler faster (overlap it with the GPU), batch more \
                 per step; a faster GPU would not help",
                thread_busy * 100.0
            ),
            Self::Gpu {
                sm_busy_percent, ..
            } => format!(
                "GPU-bound: the SMs busy {sm_busy_percent:.0}% of the time, the GPU is the limit"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::timeline::{GpuDevice, GpuSignals, RunqSignals};

    fn window(thread_ms: f64, sm: f64, sync_ms: f64) -> Window {
        Window {
            len_ms: 1000,
            runq: Some(RunqSignals {
                busiest_thread_ms: Some(thread_ms),
                ..RunqSignals::default()
            }),
            gpu: Some(GpuSignals {
                sync_ms,
                devices: vec![GpuDevice {
                    sm_util_percent: Some(sm),
                    ..GpuDevice::default()
                }],
                ..GpuSignals::default()
            }),
            ..Window::default()
        }
    }

    fn bound(ws: &[Window]) -> Option<Bound> {
        Bound::of(&ws.iter().collect::<Vec<_>>())
    }

    /// The H200's engine: its scheduler thread on a CPU 1,030 ms per 1,000 ms window, the SMs
    /// 22-26% busy, 3-4 ms of sync per second.
    #[test]
    fn a_scheduler_thread_on_a_whole_cpu_beside_idle_sms_is_host_bound() {
        let ws = [
            window(1030.0, 22.0, 3.0),
            window(1010.0, 26.0, 4.0),
            window(990.0, 24.0, 3.5),
        ];
        let b = bound(&ws).expect("a bound");
        assert!(
            matches!(b, Bound::Host { sm_busy_percent, .. } if (sm_busy_percent - 24.0).abs() < 1e-9)
        );
        assert!(
            b.line()
                .starts_with("host-bound: the GPU waits for the host"),
            "{}",
            b.line()
        );
        assert!(b.line().contains("CUDA graphs"));
    }

    #[test]
    fn busy_sms_are_gpu_bound_whatever_the_host_does() {
        let ws = [window(400.0, 97.0, 600.0), window(420.0, 95.0, 610.0)];
        let b = bound(&ws).expect("a bound");
        assert!(matches!(b, Bound::Gpu { .. }), "{b:?}");
        assert!(b.line().starts_with("GPU-bound"), "{}", b.line());
    }

    /// Half-busy SMs beside a half-busy thread, or no NVML at all: no side is named.
    #[test]
    fn neither_side_clearly_the_limit_names_none() {
        assert_eq!(bound(&[window(500.0, 60.0, 100.0)]), None);
        assert_eq!(bound(&[Window::default()]), None);
    }
}

//! The run's baseline: each signal's median over the windows latency is compared against.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::signals::Signal;
use crate::collect::timeline::Timeline;

/// Windows taken as the baseline when the time line has no phases.
pub const DEFAULT_BASELINE_WINDOWS: usize = 5;

/// The run's "before": each signal's median over the baseline windows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    /// Phase the baseline was taken from, if the time line has phases.
    pub phase: Option<String>,
    /// Indices of the baseline windows in the time line.
    pub windows: Vec<usize>,
    values: HashMap<Signal, f64>,
}

/// Signals a baseline is kept for (the ones rules compare against).
const BASELINE_SIGNALS: [Signal; 20] = [
    Signal::TtftP50Ms,
    Signal::TtftP95Ms,
    Signal::TtftP99Ms,
    Signal::ItlP99Ms,
    Signal::SendLagP50Ms,
    Signal::Waiting,
    Signal::QueueTimeP50Ms,
    Signal::QueueTimeP95Ms,
    Signal::QueueTimeMeanMs,
    Signal::ServerTtftP50Ms,
    Signal::ServerTtftMeanMs,
    Signal::RunqP99Us,
    Signal::RunqMeanUs,
    Signal::SrttMeanUs,
    Signal::KernelFirstTokenP50Ms,
    Signal::ClientServerGapMs,
    Signal::FrontendMs,
    Signal::PromptTokensPerRequest,
    Signal::PrefixHitRate,
    Signal::RunqTotalShare,
];

impl Baseline {
    /// The baseline of a time line: the phase named `baseline`, else the first phase, else the
    /// first [`DEFAULT_BASELINE_WINDOWS`] windows.
    #[must_use]
    pub fn of(timeline: &Timeline) -> Self {
        let ws = &timeline.windows;
        let phase = ws
            .iter()
            .filter_map(|w| w.phase.as_deref())
            .find(|p| p.eq_ignore_ascii_case("baseline"))
            .or_else(|| ws.iter().find_map(|w| w.phase.as_deref()))
            .map(str::to_owned);
        let windows: Vec<usize> = match &phase {
            Some(p) => (0..ws.len())
                .filter(|&i| ws[i].phase.as_ref() == Some(p))
                .collect(),
            None => (0..ws.len().min(DEFAULT_BASELINE_WINDOWS)).collect(),
        };
        let values = BASELINE_SIGNALS
            .iter()
            .filter_map(|&s| {
                let vals: Vec<f64> = windows.iter().filter_map(|&i| s.raw(&ws[i], i)).collect();
                median(&vals).map(|m| (s, m))
            })
            .collect();
        Self {
            phase,
            windows,
            values,
        }
    }

    /// The baseline of `signal`, when the baseline windows had it.
    #[must_use]
    pub fn get(&self, signal: Signal) -> Option<f64> {
        self.values.get(&signal).copied()
    }
}

/// Median of the values (mean of the middle two for an even count); `None` when empty.
#[must_use]
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        f64::midpoint(v[n / 2 - 1], v[n / 2])
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribute::signals::Source;
    use crate::collect::timeline::{LoadSignals, Quantiles, Window};

    fn window(phase: &str, ttft_p50: f64) -> Window {
        Window {
            phase: Some(phase.into()),
            len_ms: 1000,
            load: Some(LoadSignals {
                requests: 10,
                ttft_ms: Some(Quantiles {
                    p50: ttft_p50,
                    p95: ttft_p50,
                    p99: ttft_p50,
                    max: 0.0,
                }),
                ..LoadSignals::default()
            }),
            ..Window::default()
        }
    }

    #[test]
    fn baseline_is_the_baseline_phase_median() {
        let mut t = Timeline::new(0, 1000);
        t.windows = vec![
            window("warmup", 500.0),
            window("baseline", 100.0),
            window("baseline", 140.0),
            window("baseline", 120.0),
            window("peak", 900.0),
        ];
        let b = Baseline::of(&t);
        assert_eq!(b.phase.as_deref(), Some("baseline"));
        assert_eq!(b.windows, [1, 2, 3]);
        assert_eq!(b.get(Signal::TtftP50Ms), Some(120.0));
        assert_eq!(b.get(Signal::RunqP99Us), None);
        assert_eq!(
            Signal::RunqP99Us.absent_reason(&t.windows[0]),
            Source::Runq.absent_reason()
        );
    }

    #[test]
    fn without_phases_the_first_windows_are_the_baseline() {
        let mut t = Timeline::new(0, 1000);
        t.windows = (0..8)
            .map(|i| Window {
                phase: None,
                ..window("x", f64::from(i))
            })
            .collect();
        let b = Baseline::of(&t);
        assert_eq!(b.windows.len(), DEFAULT_BASELINE_WINDOWS);
        assert_eq!(b.get(Signal::TtftP50Ms), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(Signal::KvUsage.name(), "kv_usage");
    }
}

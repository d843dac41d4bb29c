//! Energy per phase: what the server's GPUs used (NVML's energy counter, per window in
//! `GpuDevice::energy_j`) over the output tokens and requests of the phase, as vLLM's
//! `gpu_energy_per_output_token_j` and `AIPerf`'s energy per token report it.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::collect::timeline::Window;

/// A phase's energy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PhaseEnergy {
    /// Joules over the phase's windows, every GPU of the server.
    pub joules: f64,
    /// Output tokens of the requests started in the phase.
    pub output_tokens: f64,
    /// Joules per output token; `None` without tokens.
    pub joules_per_output_token: Option<f64>,
    /// Output tokens per joule; `None` without energy.
    pub output_tokens_per_joule: Option<f64>,
    /// Joules per request started; `None` without requests.
    pub joules_per_request: Option<f64>,
}

impl PhaseEnergy {
    /// The energy of `windows` (a phase with its drain: the tokens of its requests count in
    /// the windows they started in, the joules in the windows they were made); `None` where no
    /// window carries an energy reading.
    #[must_use]
    pub fn of(windows: &[&Window]) -> Option<Self> {
        let readings: Vec<f64> = windows
            .iter()
            .flat_map(|w| w.gpu.iter().flat_map(|g| &g.devices))
            .filter_map(|d| d.energy_j)
            .collect();
        if readings.is_empty() {
            return None;
        }
        let joules: f64 = readings.iter().sum();
        let (tokens, requests) = windows
            .iter()
            .filter_map(|w| Some((w, w.load.as_ref()?)))
            .fold((0.0, 0u64), |(t, r), (w, l)| {
                (
                    t + l.output_tokens_per_s * w.len_ms as f64 / 1000.0,
                    r + l.requests,
                )
            });
        let per = |n: f64| (n > 0.0).then(|| joules / n);
        Some(Self {
            joules,
            output_tokens: tokens,
            joules_per_output_token: per(tokens),
            output_tokens_per_joule: (joules > 0.0).then(|| tokens / joules),
            joules_per_request: per(requests as f64),
        })
    }

    /// One line for the terminal: `energy: 812 J, 0.41 J per output token (2.4 tokens/J), 5.1 J
    /// per request`.
    #[must_use]
    pub fn line(&self) -> String {
        let mut out = format!("energy: {:.0} J", self.joules);
        if let (Some(j), Some(t)) = (self.joules_per_output_token, self.output_tokens_per_joule) {
            let _ = write!(out, ", {j:.3} J per output token ({t:.2} tokens/J)");
        }
        if let Some(r) = self.joules_per_request {
            let _ = write!(out, ", {r:.1} J per request");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::timeline::{GpuDevice, GpuSignals, LoadSignals};

    fn window(joules: &[f64], tokens_per_s: f64, requests: u64) -> Window {
        Window {
            len_ms: 1000,
            gpu: Some(GpuSignals {
                devices: joules
                    .iter()
                    .enumerate()
                    .map(|(i, j)| GpuDevice {
                        index: i as u32,
                        energy_j: Some(*j),
                        ..GpuDevice::default()
                    })
                    .collect(),
                ..GpuSignals::default()
            }),
            load: Some(LoadSignals {
                output_tokens_per_s: tokens_per_s,
                requests,
                ..LoadSignals::default()
            }),
            ..Window::default()
        }
    }

    /// Two GPUs at 350 W and 700 W for two windows of 1,000 tokens and 4 requests each.
    #[test]
    fn joules_per_token_and_request_over_every_gpu_and_window() {
        let ws = [
            window(&[350.0, 700.0], 1000.0, 4),
            window(&[350.0, 700.0], 1000.0, 4),
        ];
        let refs: Vec<&Window> = ws.iter().collect();
        let e = PhaseEnergy::of(&refs).unwrap();
        assert!((e.joules - 2100.0).abs() < 1e-9);
        assert!((e.joules_per_output_token.unwrap() - 1.05).abs() < 1e-9);
        assert!((e.output_tokens_per_joule.unwrap() - 2000.0 / 2100.0).abs() < 1e-9);
        assert!((e.joules_per_request.unwrap() - 262.5).abs() < 1e-9);
        assert_eq!(
            e.line(),
            "energy: 2100 J, 1.050 J per output token (0.95 tokens/J), 262.5 J per request"
        );
    }

    #[test]
    fn no_energy_counter_is_no_energy() {
        let w = Window::default();
        assert_eq!(PhaseEnergy::of(&[&w]), None);
    }
}

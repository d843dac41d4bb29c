//! A replayed trace's prefix sharing beside the server's own prefix-cache hit rate over the
//! phase: the trace says what an infinite prefix cache would hit, the server what its cache
//! did. A server well below the trace lost prefixes (evicted under KV pressure, or a cache that
//! is off or smaller than the replay's working set).

use serde::{Deserialize, Serialize};

use crate::collect::timeline::{ServerSignals, Timeline};
use crate::measure::prefix::PrefixSharing;

use super::fmt_num;

/// A phase's prefix sharing and the server's hit rate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PhasePrefix {
    /// The replayed trace's prefix sharing (from the load generator).
    pub trace: PrefixSharing,
    /// The server's prefix-cache hit rate over the phase's windows, 0..1: each window's rate
    /// weighted by the prompt tokens the server looked up in its cache in it (vLLM: the
    /// phase's hits over its queries), else by its prompt tokens per second, else a plain
    /// mean (`SGLang`'s gauge); `None` when the server exports no hit rate.
    pub server_hit_rate: Option<f64>,
}

impl PhasePrefix {
    /// `trace`'s sharing beside the hit rate in the windows of phase `phase` of `timeline`.
    #[must_use]
    pub fn of_phase(timeline: &Timeline, phase: &str, trace: PrefixSharing) -> Self {
        let servers: Vec<&ServerSignals> = timeline
            .windows
            .iter()
            .filter(|w| w.phase.as_deref() == Some(phase))
            .filter_map(|w| w.server.as_ref())
            .filter(|s| s.prefix_hit_rate.is_some_and(f64::is_finite))
            .collect();
        // The most exact weight that every window has (one without it would weigh nothing).
        let weights: [fn(&ServerSignals) -> Option<f64>; 3] = [
            |s| s.prefix_queries,
            |s| s.prompt_tokens_per_s,
            |_| Some(1.0),
        ];
        let server_hit_rate = weights.iter().find_map(|weight| {
            let pairs = servers
                .iter()
                .map(|s| Some((s.prefix_hit_rate?, weight(s)?)))
                .collect::<Option<Vec<(f64, f64)>>>()?;
            let total: f64 = pairs.iter().map(|(_, w)| w).sum();
            (total > 0.0).then(|| pairs.iter().map(|(r, w)| r * w).sum::<f64>() / total)
        });
        PhasePrefix {
            trace,
            server_hit_rate,
        }
    }

    /// One line for the terminal summary.
    #[must_use]
    pub fn line(&self) -> String {
        let t = &self.trace;
        let server = self.server_hit_rate.map_or_else(
            || "the server exports no prefix-cache hit rate".to_string(),
            |r| format!("the server's prefix cache hit {}%", fmt_num(r * 100.0)),
        );
        format!(
            "the trace shares {}% of its {} prompt tokens over {} requests (an infinite prefix cache's hit rate); {server}",
            fmt_num(t.sharing_ratio * 100.0),
            t.prompt_tokens,
            t.requests
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::timeline::Window;

    fn window(phase: &str, rate: Option<f64>, prompt_tokens_per_s: Option<f64>) -> Window {
        Window {
            phase: Some(phase.into()),
            server: Some(ServerSignals {
                prefix_hit_rate: rate,
                prompt_tokens_per_s,
                ..ServerSignals::default()
            }),
            ..Window::default()
        }
    }

    #[test]
    fn the_server_rate_is_its_hits_over_its_queries() {
        // Scrapes do not tile windows evenly: the tokens looked up weigh them, not the rates.
        let mut t = Timeline::new(0, 1000);
        t.windows = [(0.5, 300.0, 100.0), (0.8, 700.0, 1400.0)]
            .iter()
            .map(|&(rate, queries, per_s)| {
                let mut w = window("replay", Some(rate), Some(per_s));
                w.server.as_mut().unwrap().prefix_queries = Some(queries);
                w
            })
            .collect();
        let trace = PrefixSharing::new(1, 1, 0, 512);
        let r = PhasePrefix::of_phase(&t, "replay", trace)
            .server_hit_rate
            .unwrap();
        assert!((r - (150.0 + 560.0) / 1000.0).abs() < 1e-12, "{r}");
    }

    #[test]
    fn without_queries_the_server_rate_is_weighted_by_its_prompt_tokens() {
        let trace = PrefixSharing::new(10, 1000, 450, 512);
        let mut t = Timeline::new(0, 1000);
        t.windows = vec![
            window("warm", Some(0.0), Some(500.0)),
            window("replay", Some(0.2), Some(100.0)),
            window("replay", Some(0.5), Some(300.0)),
            window("replay", None, Some(50.0)),
        ];
        let p = PhasePrefix::of_phase(&t, "replay", trace.clone());
        let r = p.server_hit_rate.unwrap();
        assert!(
            (r - (0.2 * 100.0 + 0.5 * 300.0) / 400.0).abs() < 1e-12,
            "{r}"
        );
        assert_eq!(
            p.line(),
            "the trace shares 45% of its 1000 prompt tokens over 10 requests (an infinite prefix cache's hit rate); the server's prefix cache hit 42.5%"
        );
        // Without token counts, a plain mean; without a rate, none.
        t.windows = vec![
            window("replay", Some(0.2), None),
            window("replay", Some(0.4), None),
        ];
        let r = PhasePrefix::of_phase(&t, "replay", trace.clone())
            .server_hit_rate
            .unwrap();
        assert!((r - 0.3).abs() < 1e-12);
        t.windows = vec![window("replay", None, Some(10.0))];
        let p = PhasePrefix::of_phase(&t, "replay", trace);
        assert_eq!(p.server_hit_rate, None);
        assert!(
            p.line()
                .ends_with("the server exports no prefix-cache hit rate")
        );
    }
}

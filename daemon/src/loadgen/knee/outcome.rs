//! What a knee search found: its steps, the bracket of the knee, why it stopped, and the sweep
//! table and one-line answer for a terminal.

use serde::Serialize;

use super::spec::Knob;
use crate::measure::report::PhaseReport;

/// One step's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    /// The load asked for (req/s or users).
    pub load: f64,
    /// Requests finished per second.
    pub achieved_rps: f64,
    /// Every SLO held and the load was sustained.
    pub pass: bool,
    /// A latency SLO's threshold lies inside its observed value's 95% interval.
    pub marginal: bool,
    /// Why it failed (the SLOs that failed, or the shortfall), empty when it passed.
    pub why: Vec<String>,
    /// Each SLO: observed value and its 95% interval where one is defined.
    pub slos: Vec<SloObservation>,
    /// The step's phase report (latency summaries, counts, goodput).
    pub phase: PhaseReport,
}

/// One SLO at one step.
#[derive(Debug, Clone, Serialize)]
pub struct SloObservation {
    /// The SLO as written.
    pub slo: String,
    /// Observed value (`null`: no data).
    pub observed: Option<f64>,
    /// Distribution-free 95% interval of a latency quantile, ms.
    pub interval: Option<(f64, f64)>,
    /// Held.
    pub pass: bool,
}

/// Why the search stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SearchStop {
    /// The highest pass and the lowest fail are within the tolerance.
    Converged,
    /// Even the ceiling passed.
    CeilingPassed,
    /// Even the smallest load tried failed.
    NothingPassed,
    /// The time budget ran out.
    Budget,
    /// Interrupted (a signal).
    Interrupted,
}

/// The answer.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// Rate or users.
    pub knob: Knob,
    /// Steps in the order they ran.
    pub steps: Vec<Step>,
    /// Highest passing load.
    pub max_pass: Option<f64>,
    /// Lowest failing load above it.
    pub min_fail: Option<f64>,
    /// Why the search stopped.
    pub stopped: SearchStop,
}

impl Outcome {
    /// The sweep table and the answer, for a terminal.
    #[must_use]
    pub fn table(&self) -> String {
        let mut rows = vec![table_header(self.knob)];
        let mut sorted: Vec<&Step> = self.steps.iter().collect();
        sorted.sort_by(|a, b| a.load.total_cmp(&b.load));
        rows.extend(sorted.into_iter().map(|s| table_row(self.knob, s)));
        let mut out = String::new();
        let widths: Vec<usize> = (0..rows[0].len())
            .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
            .collect();
        for r in &rows {
            let line: Vec<String> = r
                .iter()
                .zip(&widths)
                .map(|(cell, w)| format!("{cell:<w$}"))
                .collect();
            out.push_str(line.join("  ").trim_end());
            out.push('\n');
        }
        out.push_str(&self.answer());
        out.push('\n');
        out
    }

    /// One line: the highest passing load and the interval of the knee.
    #[must_use]
    pub fn answer(&self) -> String {
        let u = self.knob.unit();
        match (self.max_pass, self.min_fail, self.stopped) {
            (Some(p), _, SearchStop::CeilingPassed) => {
                format!(
                    "max load meeting the SLOs: >= {} {u} (the ceiling passed; raise --max-load)",
                    fmt_load(p)
                )
            }
            (None, Some(f), _) => {
                format!("no load meeting the SLOs: even {} {u} failed", fmt_load(f))
            }
            (Some(p), Some(f), stop) => format!(
                "max load meeting the SLOs: {} {u} (the knee is between {} and {} {u}{})",
                fmt_load(p),
                fmt_load(p),
                fmt_load(f),
                match stop {
                    SearchStop::Budget => "; the time budget ended the search",
                    SearchStop::Interrupted => "; interrupted",
                    _ => "",
                }
            ),
            (Some(p), None, _) => format!(
                "max load meeting the SLOs: >= {} {u} (stopped before a step failed)",
                fmt_load(p)
            ),
            (None, None, _) => "no step ran".into(),
        }
    }
}

fn table_header(knob: Knob) -> Vec<String> {
    [
        &format!("load ({})", knob.unit()),
        "achieved req/s",
        "TTFT p50/p95 ms",
        "ITL p95 ms",
        "E2E p95 ms",
        "goodput/s",
        "errors",
        "result",
    ]
    .iter()
    .map(|s| (*s).to_string())
    .collect()
}

fn table_row(knob: Knob, s: &Step) -> Vec<String> {
    let lat = |k: &str, q: fn(&crate::measure::summary::Summary) -> f64| {
        s.phase
            .latency_ms
            .get(k)
            .filter(|x| x.count > 0)
            .map_or_else(|| "-".into(), |x| format!("{:.0}", q(x)))
    };
    let result = if s.pass {
        "pass".to_string()
    } else {
        format!("FAIL: {}", s.why.join("; "))
    };
    vec![
        match knob {
            Knob::Rate => fmt_load(s.load),
            Knob::Users => format!("{:.0}", s.load),
        },
        format!("{:.1}", s.achieved_rps),
        format!("{}/{}", lat("ttft", |x| x.p50), lat("ttft", |x| x.p95)),
        lat("itl", |x| x.p95),
        lat("e2e", |x| x.p95),
        format!("{:.1}", s.phase.goodput_per_s),
        format!("{:.1}%", s.phase.error_rate * 100.0),
        if s.marginal {
            format!("{result} (marginal)")
        } else {
            result
        },
    ]
}

/// A load for people: `12.5`, `40`, `0.25`.
#[must_use]
pub fn fmt_load(v: f64) -> String {
    if v >= 100.0 || (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

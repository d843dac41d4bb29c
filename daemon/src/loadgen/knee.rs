//! SLO knee search (`stress --find-max`): the highest load that still meets the SLOs.
//!
//! Short steps of one phase each, at a rate (open loop) or a number of users (closed loop):
//! 1. **grow**: the start load, then double it until a step fails (or the ceiling passes);
//!    when the start load already fails, halve it until one passes (at most 6 times);
//! 2. **bisect** between the highest passing and the lowest failing load until they are within
//!    the tolerance (5% by default; one user for concurrency) or the time budget is spent.
//!
//! A step fails when one of its SLOs fails, or, open loop, when fewer than 90% of the
//! scheduled requests finished per second (the server, or the generator, did not keep up: the
//! load was not sustained). The knee lies between the highest passing and the lowest failing
//! load: that bracket is the answer's interval. Each latency-quantile SLO's observed value
//! also gets a distribution-free 95% confidence interval (the order statistics around rank
//! n*q, binomial), and a step whose interval contains the threshold is marked *marginal*: its
//! pass or fail could flip on a rerun. Steps are separate runs with a pause between them, so
//! a queue left by an overloaded step drains before the next.

use std::time::{Duration, Instant};

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::loadgen::{
    engine::{Options, RunError, run},
    scenario::plan::Plan,
    scenario::{Load, Phase, Scenario},
};
use crate::measure::StressReport;

use crate::measure::{
    report::PhaseReport,
    slo::{Metric, Series, Slo, Stat},
    summary::decode_hist,
};

/// What the search turns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Knob {
    /// Open-loop requests per second (constant arrivals).
    Rate,
    /// Closed-loop users (connections).
    Users,
}

impl Knob {
    /// Unit for tables.
    #[must_use]
    pub fn unit(self) -> &'static str {
        match self {
            Knob::Rate => "req/s",
            Knob::Users => "users",
        }
    }
}

/// How to search.
#[derive(Debug, Clone)]
pub struct SearchSpec {
    /// Rate or users.
    pub knob: Knob,
    /// First load tried.
    pub start: f64,
    /// Never above this load.
    pub ceiling: f64,
    /// Length of each step.
    pub step: Duration,
    /// Pause between steps (the server drains what an overloaded step left).
    pub pause: Duration,
    /// Load at the start load for this long before the first step, not judged: a server's
    /// first requests (connections, caches, lazy initialisation) are not its steady state.
    pub warmup: Duration,
    /// Stop bisecting when the highest pass and the lowest fail are within this share.
    pub tolerance: f64,
    /// Whole search, pauses included; no step starts that would end past it.
    pub budget: Duration,
    /// The SLOs every step must meet.
    pub slos: Vec<Slo>,
}

/// Flags that override a scenario's `search:` block.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// SLOs added to the block's and the first phase's.
    pub slos: Vec<Slo>,
    /// Highest load.
    pub max: Option<f64>,
    /// Step length.
    pub step: Option<Duration>,
    /// Whole search.
    pub budget: Option<Duration>,
}

/// Default step length.
pub const DEFAULT_STEP: Duration = Duration::from_secs(10);
/// Default time budget of a search.
pub const DEFAULT_BUDGET: Duration = Duration::from_mins(5);

impl SearchSpec {
    /// The search of `scenario`'s first phase: its load's kind and size start it (a rate, or
    /// users for `concurrency`), its `search:` block (if any) and `flags` set the rest. Errors
    /// say what to change.
    pub fn for_scenario(scenario: &Scenario, flags: Overrides) -> Result<Self, String> {
        let phase = scenario
            .phases
            .first()
            .ok_or("a knee search needs a phase to take the request from")?;
        let block = scenario.search.clone().unwrap_or_default();
        let (knob, from_phase, ceiling) = match phase.load.unshaped() {
            Load::Concurrency { users } => (Knob::Users, *users as f64, 4096.0),
            Load::Constant { rate } | Load::Poisson { rate } | Load::Gamma { rate, .. } => {
                (Knob::Rate, *rate, 10_000.0)
            }
            Load::Ramp { from, .. } => (Knob::Rate, *from, 10_000.0),
            // `unshaped` never returns a shaped load.
            Load::Trace { .. } | Load::Shaped(_) => {
                return Err(
                    "a knee search turns a rate or a number of users, not a trace replay: give the first phase `shape: constant` or `concurrency`".into(),
                );
            }
        };
        let mut slos = block.slo;
        slos.extend(phase.slo.iter().cloned());
        slos.extend(flags.slos);
        if slos.is_empty() {
            return Err(
                "a knee search needs an SLO to meet, e.g. --find-max 'ttft_p95 < 500ms'".into(),
            );
        }
        let start = block.start.unwrap_or(from_phase);
        let ceiling = flags.max.or(block.max).unwrap_or(ceiling);
        let limit = match knob {
            Knob::Rate => crate::loadgen::scenario::HARD_MAX_RATE,
            Knob::Users => crate::loadgen::scenario::HARD_MAX_IN_FLIGHT as f64,
        };
        if !(start > 0.0 && start <= ceiling && ceiling <= limit) {
            return Err(format!(
                "the search needs 0 < start ({start}) <= max ({ceiling}) <= {limit} {}",
                knob.unit()
            ));
        }
        Ok(Self {
            knob,
            start,
            ceiling,
            step: flags.step.or(block.step).unwrap_or(DEFAULT_STEP),
            pause: Duration::from_secs(2),
            warmup: flags
                .step
                .or(block.step)
                .unwrap_or(DEFAULT_STEP)
                .min(Duration::from_secs(5)),
            tolerance: block.tolerance.unwrap_or(0.05).max(0.01),
            budget: flags.budget.or(block.budget).unwrap_or(DEFAULT_BUDGET),
            slos,
        })
    }
}

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

/// The next load to try, from the steps so far: the search's whole policy, without I/O.
#[derive(Debug, Clone)]
pub struct Planner {
    knob: Knob,
    start: f64,
    ceiling: f64,
    tolerance: f64,
    /// Highest passing load so far.
    pass: Option<f64>,
    /// Lowest failing load so far.
    fail: Option<f64>,
    halvings: u32,
}

/// Halvings of the start load tried before "nothing passes".
const MAX_HALVINGS: u32 = 6;

impl Planner {
    /// A planner starting at `start`, never above `ceiling`.
    #[must_use]
    pub fn new(knob: Knob, start: f64, ceiling: f64, tolerance: f64) -> Self {
        Self {
            knob,
            start: start.min(ceiling),
            ceiling,
            tolerance,
            pass: None,
            fail: None,
            halvings: 0,
        }
    }

    /// Records that `load` passed or failed.
    pub fn record(&mut self, load: f64, pass: bool) {
        if pass {
            self.pass = Some(self.pass.map_or(load, |p| p.max(load)));
        } else {
            self.fail = Some(self.fail.map_or(load, |f| f.min(load)));
            if self.pass.is_none() {
                self.halvings += 1;
            }
        }
    }

    /// Highest pass and lowest fail so far.
    #[must_use]
    pub fn bracket(&self) -> (Option<f64>, Option<f64>) {
        (self.pass, self.fail)
    }

    /// The next load, or why the search is over.
    pub fn next(&self) -> Result<f64, SearchStop> {
        let round = |v: f64| match self.knob {
            Knob::Rate => v,
            Knob::Users => v.round().max(1.0),
        };
        match (self.pass, self.fail) {
            (None, None) => Ok(round(self.start)),
            (Some(p), None) if p >= self.ceiling => Err(SearchStop::CeilingPassed),
            (Some(p), None) => Ok(round((p * 2.0).min(self.ceiling))),
            (None, Some(f)) => {
                let next = round(f / 2.0);
                if self.halvings > MAX_HALVINGS || next >= f {
                    Err(SearchStop::NothingPassed)
                } else {
                    Ok(next)
                }
            }
            (Some(p), Some(f)) => {
                let close = match self.knob {
                    Knob::Rate => f <= p * (1.0 + self.tolerance),
                    Knob::Users => f - p <= 1.0,
                };
                if close {
                    Err(SearchStop::Converged)
                } else {
                    Ok(round(f64::midpoint(p, f)))
                }
            }
        }
    }
}

/// Runs the search: one [`crate::loadgen::run`] per step of `base`'s first phase with the load
/// replaced. `on_step` sees each step as it ends (the sweep table's live rows).
pub async fn search(
    base: &Plan,
    spec: &SearchSpec,
    opts: &Options,
    cancel: &CancellationToken,
    mut on_step: impl FnMut(&Step),
) -> Result<Outcome, RunError> {
    let started = Instant::now();
    let mut planner = Planner::new(spec.knob, spec.start, spec.ceiling, spec.tolerance);
    if !spec.warmup.is_zero() {
        let mut warm = step_phase(base.scenario(), spec, planner.start, 0);
        warm.name = "warm-up".into();
        warm.duration = spec.warmup;
        warm.slo.clear();
        run(&step_plan(base, warm)?, opts.clone(), cancel.clone()).await?;
        tokio::time::sleep(spec.pause).await;
    }
    let mut steps = Vec::new();
    let stopped = loop {
        let load = match planner.next() {
            Ok(l) => l,
            Err(stop) => break stop,
        };
        if cancel.is_cancelled() {
            break SearchStop::Interrupted;
        }
        if let Some(last) = steps.last()
            && started.elapsed() + pause_after(spec, last) + spec.step > spec.budget
        {
            break SearchStop::Budget;
        }
        if let Some(last) = steps.last() {
            tokio::select! {
                () = tokio::time::sleep(pause_after(spec, last)) => {}
                () = cancel.cancelled() => break SearchStop::Interrupted,
            }
        }
        let step = step_phase(base.scenario(), spec, load, steps.len());
        let report = run(&step_plan(base, step)?, opts.clone(), cancel.clone()).await?;
        if report.stopped.is_some() && cancel.is_cancelled() {
            break SearchStop::Interrupted;
        }
        let step = judge(spec, load, &report);
        planner.record(load, step.pass);
        on_step(&step);
        steps.push(step);
    };
    let (max_pass, min_fail) = planner.bracket();
    Ok(Outcome {
        knob: spec.knob,
        steps,
        max_pass,
        min_fail,
        stopped,
    })
}

/// The pause after `last`: after a failed step, also its longest request (at most 30 s), the
/// time a queue it left in the server takes to drain, so the next step starts from an idle
/// server whatever the order of the steps.
fn pause_after(spec: &SearchSpec, last: &Step) -> Duration {
    let drain = if last.pass {
        0.0
    } else {
        last.phase.latency_ms.get("e2e").map_or(0.0, |e| e.max)
    };
    spec.pause + Duration::from_secs_f64((drain / 1000.0).clamp(0.0, 30.0))
}

/// `base` with `phase` as its one phase.
fn step_plan(base: &Plan, phase: Phase) -> Result<Plan, RunError> {
    base.with_phases(vec![phase])
        .map_err(|e| RunError::Internal(format!("a search step: {e}")))
}

/// The phase of step `index`: `base`'s first phase at `load`, `spec.step` long, with the
/// search's SLOs.
#[must_use]
pub fn step_phase(base: &Scenario, spec: &SearchSpec, load: f64, index: usize) -> Phase {
    let mut phase = base.phases[0].clone();
    phase.name = format!("step-{}", index + 1);
    phase.label = Some("knee-search".into());
    phase.duration = spec.step;
    let step_load = match (spec.knob, phase.load.unshaped()) {
        // The arrival process stays what the phase said; only its rate changes.
        (Knob::Rate, Load::Poisson { .. }) => Load::Poisson { rate: load },
        (Knob::Rate, Load::Gamma { burstiness, .. }) => Load::Gamma {
            rate: load,
            burstiness: *burstiness,
        },
        (Knob::Rate, _) => Load::Constant { rate: load },
        (Knob::Users, _) => Load::Concurrency {
            users: load as usize,
        },
    };
    // Complexity shaping, when the phase has it, stays too.
    phase.load = phase.load.shaped_like(step_load);
    phase.slo.clone_from(&spec.slos);
    phase
}

/// Share of the scheduled rate that must finish per second for a step to count as sustained.
pub const SUSTAINED_SHARE: f64 = 0.9;

fn judge(spec: &SearchSpec, load: f64, report: &StressReport) -> Step {
    let phase = report.phases[0].clone();
    let mut why: Vec<String> = Vec::new();
    let mut marginal = false;
    let slos: Vec<SloObservation> = spec
        .slos
        .iter()
        .map(|slo| {
            // The step's result of this SLO, found by its text; none is a failure (no data).
            let (observed, pass) = phase
                .slo
                .iter()
                .find(|r| r.slo == slo.text)
                .map_or((None, false), |r| (r.observed, r.pass));
            let interval = quantile_interval(slo, &phase);
            if let (Some((lo, hi)), true) = (interval, matches!(slo.metric, Metric::Latency(..))) {
                marginal |= lo <= slo.threshold && slo.threshold <= hi;
            }
            if !pass {
                why.push(match observed {
                    Some(v) => format!("{} (observed {v:.1})", slo.text),
                    None => format!("{} (no data)", slo.text),
                });
            }
            SloObservation {
                slo: slo.text.clone(),
                observed,
                interval,
                pass,
            }
        })
        .collect();
    let achieved = phase.requests_per_s;
    if spec.knob == Knob::Rate && achieved < SUSTAINED_SHARE * load {
        why.push(format!(
            "{achieved:.1} req/s finished of {} scheduled",
            fmt_load(load)
        ));
    }
    Step {
        load,
        achieved_rps: achieved,
        pass: why.is_empty(),
        marginal,
        why,
        slos,
        phase,
    }
}

/// The 95% interval of a latency quantile SLO's observed value (ms), from the phase's
/// histogram: the values at ranks n*q -+ 1.96*sqrt(n*q*(1-q)) (the binomial order-statistic
/// interval, which assumes nothing about the distribution).
fn quantile_interval(slo: &Slo, phase: &PhaseReport) -> Option<(f64, f64)> {
    let Metric::Latency(series, Stat::Quantile(q)) = slo.metric else {
        return None;
    };
    let key = match series {
        Series::Ttft => "ttft",
        Series::Itl => "itl",
        Series::Tpot => "tpot",
        Series::E2e => "e2e",
        Series::SendLag => "send_lag",
    };
    let h = decode_hist(phase.histograms.get(key)?).ok()?;
    let n = h.len() as f64;
    if n < 1.0 {
        return None;
    }
    let half = 1.96 * (n * q * (1.0 - q)).sqrt();
    let at = |rank: f64| {
        let quantile = (rank / n).clamp(0.0, 1.0);
        // Histograms hold microseconds.
        h.value_at_quantile(quantile) as f64 / 1000.0
    };
    Some((at((n * q - half).floor()), at((n * q + half).ceil())))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the planner against a server whose SLO breaks above `knee`.
    fn run(knob: Knob, start: f64, ceiling: f64, knee: f64) -> (Vec<f64>, Planner, SearchStop) {
        let mut p = Planner::new(knob, start, ceiling, 0.05);
        let mut tried = Vec::new();
        loop {
            match p.next() {
                Ok(load) => {
                    assert!(!tried.contains(&load), "{load} tried twice: {tried:?}");
                    tried.push(load);
                    p.record(load, load <= knee);
                }
                Err(stop) => return (tried, p, stop),
            }
            assert!(tried.len() < 40, "{tried:?}");
        }
    }

    #[test]
    fn converges_within_the_tolerance_of_the_knee() {
        for knee in [0.7, 3.0, 37.3, 41.0, 199.0] {
            let (tried, p, stop) = run(Knob::Rate, 1.0, 1000.0, knee);
            assert_eq!(stop, SearchStop::Converged, "{knee}: {tried:?}");
            let (Some(pass), Some(fail)) = p.bracket() else {
                panic!("{knee}: {tried:?}")
            };
            assert!(pass <= knee && knee < fail, "{knee}: {pass} {fail}");
            assert!(fail <= pass * 1.05, "{knee}: {pass} {fail}");
            assert!(tried.len() <= 16, "{knee}: {} steps", tried.len());
        }
    }

    #[test]
    fn users_bisect_to_one() {
        let (tried, p, stop) = run(Knob::Users, 1.0, 512.0, 23.0);
        assert_eq!(stop, SearchStop::Converged, "{tried:?}");
        assert_eq!(p.bracket(), (Some(23.0), Some(24.0)));
        assert!(tried.iter().all(|u| u.fract() == 0.0), "{tried:?}");
    }

    #[test]
    fn a_scenario_search_block_sets_the_search_and_flags_override_it() {
        let yaml = "target: http://127.0.0.1:9\nsearch: {slo: ['ttft_p95 < 1s'], max: 64, step: 3s, tolerance: 10%}\nphases:\n  - name: a\n    duration: 1s\n    load: {shape: concurrency, users: 2}\n    slo: ['error_rate < 1%']\n";
        let plan = Plan::from_yaml(yaml, "s.yaml", std::path::Path::new(".")).unwrap();
        let sc = plan.scenario();
        let spec = SearchSpec::for_scenario(sc, Overrides::default()).unwrap();
        assert_eq!(spec.knob, Knob::Users);
        assert_eq!((spec.start, spec.ceiling), (2.0, 64.0));
        assert_eq!(spec.step, Duration::from_secs(3));
        assert!((spec.tolerance - 0.1).abs() < 1e-9);
        let slos: Vec<&str> = spec.slos.iter().map(|s| s.text.as_str()).collect();
        assert_eq!(slos, ["ttft_p95 < 1s", "error_rate < 1%"]);
        let flags = Overrides {
            max: Some(8.0),
            step: Some(Duration::from_secs(1)),
            ..Overrides::default()
        };
        let spec = SearchSpec::for_scenario(sc, flags).unwrap();
        assert_eq!((spec.ceiling, spec.step), (8.0, Duration::from_secs(1)));
        let step = step_plan(&plan, step_phase(sc, &spec, 5.0, 2)).unwrap();
        let step = step.scenario();
        assert!(matches!(
            step.phases[0].load,
            Load::Concurrency { users: 5 }
        ));
        assert_eq!(step.phases[0].name, "step-3");
        assert!(step.search.is_none());

        let none = sc.phases[0].clone();
        let mut bare = sc.clone();
        bare.search = None;
        bare.phases = vec![phase_without_slo(none)];
        let e = SearchSpec::for_scenario(&bare, Overrides::default()).unwrap_err();
        assert!(e.contains("needs an SLO"), "{e}");
    }

    fn phase_without_slo(
        mut p: crate::loadgen::scenario::Phase,
    ) -> crate::loadgen::scenario::Phase {
        p.slo.clear();
        p
    }

    #[test]
    fn ceiling_and_nothing_passing_end_the_search() {
        let (_, p, stop) = run(Knob::Rate, 1.0, 50.0, 1e9);
        assert_eq!(stop, SearchStop::CeilingPassed);
        assert_eq!(p.bracket(), (Some(50.0), None));
        let (tried, p, stop) = run(Knob::Rate, 8.0, 50.0, 0.0);
        assert_eq!(stop, SearchStop::NothingPassed, "{tried:?}");
        assert_eq!(p.bracket().0, None);
        assert!(tried.len() <= 8, "{tried:?}");
    }
}

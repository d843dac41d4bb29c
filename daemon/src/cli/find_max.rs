//! `stress --find-max SLO` (or a scenario's `search:` block): the knee search of
//! `loadgen::knee`, its sweep table, and with `--explain` the verdict just past the knee.

use std::{path::Path, process::ExitCode, time::Duration};

use anyhow::Context as _;
use inferscope::{
    atomic,
    loadgen::{
        Options, Plan, Scenario,
        knee::{self, Knob, Outcome, Overrides, SearchSpec, SearchStop},
        scenario::Load,
    },
    measure::slo::Slo,
};
use tokio_util::sync::CancellationToken;

use super::explain::ExplainArgs;

/// Flags of the knee search.
#[derive(clap::Args, Debug, Clone)]
pub struct FindMaxArgs {
    /// Find the highest load that meets this SLO (and every --slo), e.g. `ttft_p95 < 500ms`:
    /// short steps of the load, doubled until one fails, then bisected. The load starts at
    /// --rate (open loop, default 1 req/s) or --connections (closed loop: users).
    #[arg(long, value_name = "SLO")]
    pub find_max: Option<String>,
    /// With --find-max: the highest load tried (default 10000 req/s, or 4096 users).
    #[arg(long, value_name = "LOAD")]
    max_load: Option<f64>,
    /// With --find-max: length of each step (default 10s).
    #[arg(long, value_parser = super::args::positive_duration)]
    step_duration: Option<Duration>,
    /// With --find-max: the whole search at most, pauses included (default 5m).
    #[arg(long, value_parser = super::args::positive_duration)]
    search_time: Option<Duration>,
}

impl FindMaxArgs {
    /// Whether this run is a search: the flag, or a scenario with `search:`.
    pub fn wanted(&self, scenario: &Scenario) -> bool {
        self.find_max.is_some() || scenario.search.is_some()
    }

    /// Refuses the search's tuning flags when no search runs (neither --find-max nor a
    /// scenario's `search:` block): they would tune nothing.
    pub fn check(&self, scenario: &Scenario) -> anyhow::Result<()> {
        if self.wanted(scenario) {
            return Ok(());
        }
        let tuning = [
            ("--max-load", self.max_load.is_some()),
            ("--step-duration", self.step_duration.is_some()),
            ("--search-time", self.search_time.is_some()),
        ];
        if let Some((flag, _)) = tuning.iter().find(|(_, given)| *given) {
            anyhow::bail!(
                "{flag} tunes a knee search: add --find-max SLO (or `search:` to the scenario), or drop {flag}"
            );
        }
        Ok(())
    }

    /// The step length when a search runs from flags alone (a phase's duration).
    pub fn step(&self) -> Option<Duration> {
        self.find_max
            .as_ref()
            .map(|_| self.step_duration.unwrap_or(knee::DEFAULT_STEP))
    }

    /// The search of `scenario` with these flags.
    pub fn spec(&self, scenario: &Scenario) -> anyhow::Result<SearchSpec> {
        let slos = self
            .find_max
            .iter()
            .map(|s| Slo::parse(s))
            .collect::<Result<Vec<_>, _>>()?;
        SearchSpec::for_scenario(
            scenario,
            Overrides {
                slos,
                max: self.max_load,
                step: self.step_duration,
                budget: self.search_time,
            },
        )
        .map_err(|e| anyhow::anyhow!("{e}"))
    }
}

/// Runs the search, prints the table (rows live, then sorted) and the answer, writes the
/// outcome to `out`; with `--explain`, explains a baseline step and the first failing load.
pub async fn run(
    plan: &Plan,
    spec: &SearchSpec,
    opts: Options,
    cancel: CancellationToken,
    explain: &ExplainArgs,
    out: Option<&Path>,
) -> anyhow::Result<(Outcome, ExitCode)> {
    let scenario = plan.scenario();
    if scenario.phases.len() > 1 {
        eprintln!(
            "find-max: the search loads the first phase ({}) only; the other {} phases do not run",
            scenario.phases[0].name,
            scenario.phases.len() - 1
        );
    }
    let slos: Vec<&str> = spec.slos.iter().map(|s| s.text.as_str()).collect();
    eprintln!(
        "find-max: {} steps of {} from {} {u} up to {} {u} (at most {}; {} of warm-up first), SLOs: {}",
        match spec.knob {
            Knob::Rate => "open-loop",
            Knob::Users => "closed-loop",
        },
        humantime::format_duration(spec.step),
        spec.start,
        spec.ceiling,
        humantime::format_duration(spec.budget),
        humantime::format_duration(spec.warmup),
        slos.join(", "),
        u = spec.knob.unit(),
    );
    let outcome = knee::search(plan, spec, &opts, &cancel, |s| {
        eprintln!(
            "  {} {}: {:.1} req/s finished -> {}{}",
            knee::fmt_load(s.load),
            spec.knob.unit(),
            s.achieved_rps,
            if s.pass {
                "pass".into()
            } else {
                format!("FAIL ({})", s.why.join("; "))
            },
            if s.marginal { " (marginal)" } else { "" }
        );
    })
    .await?;
    print!("{}", outcome.table());
    if let Some(path) = out {
        atomic::write_bytes(path, serde_json::to_string_pretty(&outcome)?.as_bytes())
            .with_context(|| format!("writing the search to {}", path.display()))?;
        eprintln!("search written to {}", path.display());
    }
    if explain.explain && !cancel.is_cancelled() {
        // Boxed: the explained pair of runs is a large future, awaited once.
        Box::pin(explain_knee(
            plan,
            spec,
            &outcome,
            opts,
            cancel.clone(),
            explain,
        ))
        .await?;
    }
    let code = match outcome.stopped {
        SearchStop::Interrupted => ExitCode::from(130),
        SearchStop::NothingPassed => ExitCode::from(2),
        _ => ExitCode::SUCCESS,
    };
    Ok((outcome, code))
}

/// Runs two explained phases, `baseline` at the lowest passing load and `beyond` at the lowest
/// failing one, and says what the bottleneck is beyond the knee.
async fn explain_knee(
    plan: &Plan,
    spec: &SearchSpec,
    outcome: &Outcome,
    opts: Options,
    cancel: CancellationToken,
    args: &ExplainArgs,
) -> anyhow::Result<()> {
    let low = outcome
        .steps
        .iter()
        .filter(|s| s.pass)
        .map(|s| s.load)
        .min_by(f64::total_cmp);
    let (Some(low), Some(max_pass), Some(fail)) = (low, outcome.max_pass, outcome.min_fail) else {
        eprintln!("find-max: no passing and failing load to compare; nothing to explain");
        return Ok(());
    };
    let scenario = plan.scenario();
    let mut baseline = knee::step_phase(scenario, spec, low, 0);
    baseline.name = "baseline".into();
    let mut beyond = knee::step_phase(scenario, spec, fail, 1);
    beyond.name = "beyond".into();
    let two = plan.with_phases(vec![baseline, beyond])?;
    eprintln!(
        "find-max: explaining: baseline at {low} {u}, then beyond the knee at {fail} {u}",
        u = spec.knob.unit()
    );
    // With --confirm, `beyond` is run again at half its load (below the knee).
    let (_, explained) = super::explain::run(&two, opts, cancel, args).await?;
    if let Some(p) = explained.phase("beyond") {
        let unit = spec.knob.unit();
        let load = match &scenario.phases[0].load {
            Load::Concurrency { .. } => format!("{max_pass:.0} {unit}"),
            _ => format!("{max_pass} {unit}"),
        };
        let confirmed = p
            .confirmation
            .as_ref()
            .map(|c| format!("; {}", c.line()))
            .unwrap_or_default();
        println!(
            "beyond {load} the bottleneck is {} (score {:.2}): {}{confirmed}",
            p.verdict_name(),
            p.confidence,
            p.hint
        );
    }
    Ok(())
}

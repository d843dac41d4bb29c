//! `--confirm`: after the verdicts, one short step at half the load of each phase whose
//! verdict the load drives, judged by [`crate::attribute::confirm`].

use std::time::Duration;

use super::ExplainError;
use crate::{
    attribute::{
        Cause, LatencyMetric, MEDIAN_BAND,
        confirm::{self, Confirmation, Outcome},
    },
    export::report::Report,
    loadgen::{
        self, Options, Plan,
        scenario::{Load, Phase},
    },
    measure::RequestRecord,
};
use tokio_util::sync::CancellationToken;

/// Longest follow-up step.
const STEP: Duration = Duration::from_secs(10);

/// Puts every named, non-baseline verdict of `report` to the test (see the module doc).
pub(super) async fn run(
    plan: &Plan,
    opts: &Options,
    cancel: &CancellationToken,
    report: &mut Report,
) -> Result<(), ExplainError> {
    for p in &mut report.phases {
        let Some(d) = p.decomposition.clone().filter(|d| d.increase_ms > 0.0) else {
            continue;
        };
        // A drain sends nothing: no step of its load can be run.
        if p.drain || matches!(p.dominant, Cause::None | Cause::Unexplained) {
            continue;
        }
        let mut c = Confirmation {
            cause: p.dominant,
            step: String::new(),
            phase_ms: d.value_ms,
            baseline_ms: d.baseline_ms,
            step_ms: None,
            outcome: Outcome::CannotByLoad,
        };
        if confirm::by_load(p.dominant)
            && let Some((phase, what)) = halved(plan, &p.name)
        {
            let step = plan.with_phases(vec![phase])?;
            eprintln!(
                "explain: confirming {} in phase {}: {what}",
                p.dominant, p.name
            );
            let lg = loadgen::run(&step, opts.clone(), cancel.clone()).await?;
            let Some(ms) = band_mean(&lg.records, d.metric) else {
                continue;
            };
            c.step = what;
            c.step_ms = Some(ms);
            c.outcome = confirm::judge(d.baseline_ms, d.value_ms, ms);
        }
        eprintln!("explain: phase {}: {}", p.name, c.line());
        p.confirm(c);
    }
    Ok(())
}

/// Phase `name` of `plan` at half its load, at most [`STEP`] long, and the change in words;
/// `None` for a load that cannot be halved (a trace, a phase not found).
fn halved(plan: &Plan, name: &str) -> Option<(Phase, String)> {
    let mut phase = plan
        .scenario()
        .phases
        .iter()
        .find(|p| p.name == name)?
        .clone();
    phase.duration = phase.duration.min(STEP);
    let (load, what) = match phase.load.unshaped() {
        Load::Constant { rate } => (Load::Constant { rate: rate / 2.0 }, rate / 2.0),
        Load::Poisson { rate } => (Load::Poisson { rate: rate / 2.0 }, rate / 2.0),
        Load::Gamma { rate, burstiness } => (
            Load::Gamma {
                rate: rate / 2.0,
                burstiness: *burstiness,
            },
            rate / 2.0,
        ),
        Load::Ramp { from, to } => (
            Load::Ramp {
                from: from / 2.0,
                to: to / 2.0,
            },
            to / 2.0,
        ),
        Load::Concurrency { users } => {
            let users = (users / 2).max(1);
            phase.load = Load::Concurrency { users };
            return Some((phase, format!("half the load ({users} users)")));
        }
        Load::Trace { .. } | Load::Shaped(_) => return None,
    };
    phase.load = phase.load.shaped_like(load);
    Some((phase, format!("half the load ({what} req/s)")))
}

/// The mean latency of the successful `records` ranked in [`MEDIAN_BAND`], ms: the same
/// measure as the phase's decomposition.
fn band_mean(records: &[RequestRecord], metric: LatencyMetric) -> Option<f64> {
    let mut ms: Vec<f64> = records
        .iter()
        .filter(|r| !r.counts_as_error())
        .filter_map(|r| match metric {
            LatencyMetric::Ttft => r.ttft_us(),
            LatencyMetric::E2e => Some(r.e2e_us()),
        })
        .map(|us| us as f64 / 1000.0)
        .collect();
    if ms.is_empty() {
        return None;
    }
    ms.sort_by(f64::total_cmp);
    let band = &ms[crate::quantile::exact::band(ms.len(), MEDIAN_BAND)];
    Some(band.iter().sum::<f64>() / band.len() as f64)
}

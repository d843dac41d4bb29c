//! Running the search: a warm-up, then one run per step of the first phase at the planner's
//! load, with a pause between steps, until the planner, the budget or a signal ends it.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::judge::judge;
use super::outcome::{Outcome, SearchStop, Step};
use super::planner::Planner;
use super::spec::{Knob, SearchSpec};
use crate::loadgen::{
    engine::{Options, RunError, run},
    scenario::plan::Plan,
    scenario::{Load, Phase, Scenario},
};

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
pub(super) fn step_plan(base: &Plan, phase: Phase) -> Result<Plan, RunError> {
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

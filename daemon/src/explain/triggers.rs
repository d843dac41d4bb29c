//! An explained run's trigger rules on the pipeline: the client's metrics come from the load
//! generator's records as they finish, each firing is said on stderr and goes into the report.

use std::sync::Arc;

use tokio::task::JoinHandle;

use crate::{
    loadgen::{Options, Scenario},
    node::NodeOptions,
    triggers::{self, Engine, Firing, Outcome, Rule, action::OnDone, live::LiveLoad},
};

/// Hooks `rules` onto the pipeline and the run's records. Returns the action task.
pub(super) fn start(
    rules: Vec<Rule>,
    scenario: &Scenario,
    opts: &mut Options,
    node: &mut NodeOptions,
) -> JoinHandle<Vec<Firing>> {
    // Beside any other watcher of the records (a live OTLP export).
    let phases = scenario.phases.iter().map(|p| p.name.clone()).collect();
    let (tx, live) = LiveLoad::channel(phases);
    crate::loadgen::engine::observe::add(opts, tx);
    let engine = Engine::new(rules).with_live(live);
    let say: OnDone = Arc::new(|f: &Firing| {
        let outcome = f.outcome.as_ref().map_or(String::new(), Outcome::line);
        eprintln!(
            "trigger {} fired: {}; {}: {outcome}",
            f.rule,
            f.values_line(),
            f.action
        );
    });
    let started = triggers::start(engine, Some(say), opts.reach);
    node.observers.push(started.observer);
    started.runner
}

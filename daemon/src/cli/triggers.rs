//! Wiring trigger rules into `stress --explain`: reading the rules (a scenario's `triggers:`
//! and `--triggers FILE`), checking them before anything starts, and hooking the engine onto
//! the collection pipeline as an observer. The daemon's are wired in `inferscope::daemon`.

use std::{path::Path, sync::Arc};

use anyhow::bail;
use inferscope::{
    loadgen::{Options, Scenario},
    node::NodeOptions,
    triggers::{self, Engine, Firing, Rule, action::OnDone, live::LiveLoad},
};
use tokio::task::JoinHandle;

/// The scenario's rules and the file's, checked: unique names, webhooks on loopback unless
/// `allow_remote`.
fn rules(
    scenario: &Scenario,
    file: Option<&Path>,
    allow_remote: bool,
) -> anyhow::Result<Vec<Rule>> {
    let mut rules = triggers::of_scenario(scenario)?;
    if let Some(path) = file {
        for r in triggers::load_file(path)? {
            if rules.iter().any(|o| o.name == r.name) {
                bail!(
                    "trigger `{}` is defined in the scenario and in {}: rename one",
                    r.name,
                    path.display()
                );
            }
            rules.push(r);
        }
    }
    triggers::check_remote(&rules, allow_remote)?;
    Ok(rules)
}

/// Checks the rules of a `stress` run before it starts (the scenario's and `--triggers
/// file`'s): they need `--explain`.
pub fn check_stress(
    scenario: &Scenario,
    file: Option<&Path>,
    explain: bool,
    allow_remote: bool,
) -> anyhow::Result<()> {
    let rules = rules(scenario, file, allow_remote)?;
    if !rules.is_empty() && !explain {
        bail!(
            "trigger rules are judged on the explained windows: add --explain (or remove `triggers:` / --triggers)"
        );
    }
    Ok(())
}

/// Hooks the rules of a `stress --explain` run onto the pipeline; client metrics come from the
/// load generator's records as they finish. Returns the action task, whose firings go into
/// the report; `None` without rules.
pub fn start_for_stress(
    scenario: &Scenario,
    file: Option<&Path>,
    opts: &mut Options,
    node: &mut NodeOptions,
) -> anyhow::Result<Option<JoinHandle<Vec<Firing>>>> {
    let rules = rules(scenario, file, opts.allow_remote)?;
    if rules.is_empty() {
        return Ok(None);
    }
    // Beside any other watcher of the records (a live OTLP export).
    let phases = scenario.phases.iter().map(|p| p.name.clone()).collect();
    let (tx, live) = LiveLoad::channel(phases);
    inferscope::loadgen::engine::observe::add(opts, tx);
    let engine = Engine::new(rules).with_live(live);
    let say: OnDone = Arc::new(|f: &Firing| {
        let outcome = f
            .outcome
            .as_ref()
            .map_or(String::new(), triggers::Outcome::line);
        eprintln!(
            "trigger {} fired: {}; {}: {outcome}",
            f.rule,
            f.values_line(),
            f.action
        );
    });
    let started = triggers::start(engine, Some(say), opts.allow_remote);
    node.observers.push(started.observer);
    Ok(Some(started.runner))
}

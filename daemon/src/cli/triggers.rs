//! Wiring trigger rules into `stress --explain` and `inferscope daemon`: reading the rules
//! (a scenario's `triggers:` and `--triggers FILE`), checking them before anything starts, and
//! hooking the engine onto the collection pipeline as an observer.

use std::{path::Path, sync::Arc};

use anyhow::{Context as _, bail};
use inferscope::{
    export::otlp::OtlpExporter,
    loadgen::{Options, Scenario},
    node::NodeOptions,
    triggers::{self, Counts, Engine, Firing, Rule, action::OnDone, live::LiveLoad},
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

/// Hooks the daemon's `--triggers FILE` onto the pipeline; each firing is logged and, with an
/// OTLP export, sent as an `inferscope.trigger` span. Returns the action task and the counts
/// for `/metrics`.
pub fn start_for_daemon(
    file: &Path,
    allow_remote: bool,
    otlp: Option<&Arc<OtlpExporter>>,
    node: &mut NodeOptions,
) -> anyhow::Result<(JoinHandle<Vec<Firing>>, Arc<Counts>)> {
    let rules = triggers::load_file(file)?;
    triggers::check_remote(&rules, allow_remote)?;
    for r in &rules {
        tracing::info!(
            rule = %r.name,
            "trigger: when {} for {}",
            r.when_text.join(" and "),
            humantime::format_duration(r.hold)
        );
    }
    let on_done: Option<OnDone> = otlp.map(|x| {
        let x = Arc::clone(x);
        Arc::new(move |f: &Firing| x.record_trigger(std::time::SystemTime::now(), &attributes(f)))
            as OnDone
    });
    let started = triggers::start(Engine::new(rules), on_done, allow_remote);
    node.observers.push(started.observer);
    Ok((started.runner, started.counts))
}

/// A firing as OTLP attributes.
fn attributes(f: &Firing) -> Vec<(String, String)> {
    let mut a = vec![
        ("inferscope.trigger.rule".to_owned(), f.rule.clone()),
        (
            "inferscope.trigger.window_start_unix_ms".to_owned(),
            f.window_start_unix_ms.to_string(),
        ),
        (
            "inferscope.verdict".to_owned(),
            f.verdict.cause.name().to_owned(),
        ),
        (
            "inferscope.verdict.evidence".to_owned(),
            f.verdict.evidence_line(),
        ),
        ("inferscope.trigger.action".to_owned(), f.action.clone()),
        (
            "inferscope.trigger.outcome".to_owned(),
            f.outcome
                .as_ref()
                .map_or(String::new(), triggers::Outcome::line),
        ),
    ];
    a.extend(
        f.values
            .iter()
            .map(|(k, v)| (format!("inferscope.trigger.value.{k}"), v.to_string())),
    );
    // `server` in inferscope's namespace; `k8s.*` as the semantic conventions name them.
    a.extend(
        f.server
            .iter()
            .flat_map(inferscope::collect::identity::ServerIdentity::attributes)
            .map(|(k, v)| {
                let k = if k.starts_with("k8s.") {
                    k.to_owned()
                } else {
                    format!("inferscope.{k}")
                };
                (k, v)
            }),
    );
    a
}

/// Waits for the actions still running when the pipeline stopped (each ends by its timeout).
pub async fn finish(runner: JoinHandle<Vec<Firing>>) -> anyhow::Result<Vec<Firing>> {
    runner.await.context("the trigger action task failed")
}

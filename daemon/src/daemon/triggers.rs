//! The daemon's trigger rules on the pipeline: each firing is logged and, with an OTLP export,
//! sent as an `inferscope.trigger` span.

use std::sync::Arc;

use tokio::task::JoinHandle;

use crate::{
    collect::identity::ServerIdentity,
    dial::Reach,
    export::otlp::OtlpExporter,
    node::NodeOptions,
    triggers::{self, Counts, Engine, Firing, Outcome, Rule, action::OnDone},
};

/// Hooks `rules` onto the pipeline. Returns the action task and the counts for `/metrics`.
pub(super) fn start(
    rules: Vec<Rule>,
    reach: Reach,
    otlp: Option<&Arc<OtlpExporter>>,
    node: &mut NodeOptions,
) -> (JoinHandle<Vec<Firing>>, Arc<Counts>) {
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
    let started = triggers::start(Engine::new(rules), on_done, reach);
    node.observers.push(started.observer);
    (started.runner, started.counts)
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
            f.outcome.as_ref().map_or(String::new(), Outcome::line),
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
            .flat_map(ServerIdentity::attributes)
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

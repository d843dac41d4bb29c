//! An explained run (`stress --explain`), assembled: while the load runs, the target's
//! processes are watched, its `/metrics` scraped and NVML sampled; afterwards everything is
//! joined on one time line, every window attributed and the report built; with `confirm`, each
//! verdict the load drives is put to the test at half the load. `cli/` reads the flags into an
//! [`Explain`], prints the report and writes its files.

mod confirm;
mod triggers;

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::{
    collect::{load_fold::LoadFold, session::SessionOptions},
    export::report::Report,
    loadgen::{self, Options, Plan, PlanError, RunError, StressReport},
    node::{Node, NodeOptions, Service},
    triggers::Rule,
};

/// What an explained run watches and how it judges.
#[derive(Clone)]
pub struct Explain {
    /// The target's processes (kernel evidence of the server is off without any).
    pub servers: Vec<u32>,
    /// Hops of the pipeline behind the target, each with its own time line and verdict.
    pub services: Vec<Service>,
    /// The target's Prometheus endpoint.
    pub metrics_url: String,
    /// Length of a time-line window.
    pub window: Duration,
    /// Trigger rules judged on every window.
    pub triggers: Vec<Rule>,
    /// Put each verdict to the test with a step at half its phase's load.
    pub confirm: bool,
}

/// Why an explained run has no report.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    /// The load generator (or a `confirm` step) failed.
    #[error(transparent)]
    Run(#[from] RunError),
    /// A `confirm` step's plan is not valid.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// A task of the run ended in a panic.
    #[error("the {0} task failed: {1}")]
    Task(&'static str, tokio::task::JoinError),
}

impl Explain {
    /// Runs `plan` with the collectors on; returns the load generator's report and the
    /// explained report.
    pub async fn run(
        self,
        plan: &Plan,
        mut opts: Options,
        cancel: CancellationToken,
    ) -> Result<(StressReport, Report), ExplainError> {
        let scenario = plan.scenario();
        let servers = Service::outside(&self.services, self.servers);
        for s in &self.services {
            eprintln!("explain: service {} is pids {:?}", s.name, s.pids);
        }
        if servers.is_empty() {
            eprintln!(
                "explain: no process listens on the target's port here; kernel evidence of the server is off (give --pid)"
            );
        } else {
            eprintln!(
                "explain: watching server pids {servers:?}, scraping {}",
                self.metrics_url
            );
        }
        // The follow-up steps of `confirm` run with the same options, unobserved.
        let confirm_opts = Options {
            observer: None,
            progress: false,
            keep_records: true,
            ..opts.clone()
        };
        let confirm_cancel = cancel.clone();
        let mut node_opts = NodeOptions::new(SessionOptions {
            servers: servers
                .iter()
                .chain(self.services.iter().flat_map(|s| &s.pids))
                .copied()
                .collect(),
            loadgen: Some(std::process::id()),
            cuda_targets: Vec::new(),
            kernel_without_servers: false,
            metrics_url: Some(self.metrics_url),
            // The target's TLS options hold for its metrics endpoint too.
            tls: opts.tls.clone(),
            window: self.window,
        });
        // The report covers the whole run, however long.
        node_opts.keep = usize::MAX;
        node_opts.max_windows = usize::MAX;
        node_opts.services = self.services;
        let firings = (!self.triggers.is_empty())
            .then(|| triggers::start(self.triggers, scenario, &mut opts, &mut node_opts));
        // Every request into the windows as it finishes, whatever records the run keeps.
        let fold = LoadFold::watch(&mut opts, self.window.as_millis() as u64);
        let (node, _handle) = Node::start(node_opts);
        for m in node.missing() {
            eprintln!("explain: {m}");
        }
        let plan_run = plan.clone();
        let load_done = CancellationToken::new();
        let done = load_done.clone();
        let run = tokio::spawn(async move {
            // Dropped when the load ends, even by a panic: the node must not wait forever.
            let _done = done.drop_guard();
            loadgen::run(&plan_run, opts, cancel).await
        });
        // The node closes windows in step with the load and stops when it ends.
        let finished = node.run(load_done.cancelled_owned()).await;
        let lg = run
            .await
            .map_err(|e| ExplainError::Task("load generator", e))??;
        let firings = match firings {
            Some(runner) => runner
                .await
                .map_err(|e| ExplainError::Task("trigger action", e))?,
            None => Vec::new(),
        };
        let fold = fold.await.map_err(|e| ExplainError::Task("load fold", e))?;
        let mut explained = Report::of_run(&lg, &fold, finished).with_triggers(firings);
        if self.confirm && !confirm_cancel.is_cancelled() {
            confirm::run(plan, &confirm_opts, &confirm_cancel, &mut explained).await?;
        }
        Ok((lg, explained))
    }
}

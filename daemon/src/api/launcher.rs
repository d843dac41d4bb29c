//! The real [`RunLauncher`]: runs the embedded load generator in-process, one run at a time,
//! as a tokio task with a cancellation token.

use std::{
    collections::BTreeMap,
    panic::AssertUnwindSafe,
    path::PathBuf,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use futures_util::FutureExt as _;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use super::runs::{LaunchError, RunHandle, RunLauncher, RunState, RunStatus};
use crate::{
    clock::unix_ms,
    dial::Reach,
    export::otlp::{OtlpExporter, Sampler, live},
    loadgen::{self, Options, Plan, StopKind},
    tls::TlsOptions,
};

/// Finished runs kept for `GET /api/v1/runs/{id}`; older ones are forgotten.
const KEEP_RUNS: usize = 32;

struct Run {
    status: RunStatus,
    cancel: CancellationToken,
    /// Phase names with their planned end, from the run's start.
    phases: Vec<(String, Duration)>,
    started: std::time::Instant,
    report: Option<serde_json::Value>,
}

impl Run {
    /// The status, with the current phase worked out from the clock while running.
    fn current(&self) -> RunStatus {
        let mut s = self.status.clone();
        if matches!(s.state, RunState::Running | RunState::Stopping) {
            let t = self.started.elapsed();
            s.phase = self
                .phases
                .iter()
                .find(|(_, end)| t < *end)
                .or(self.phases.last())
                .map(|(n, _)| n.clone());
        }
        s
    }

    /// Records how the run ended: its state, error and report.
    fn finish(&mut self, result: Result<loadgen::StressReport, loadgen::RunError>) {
        self.status.finished_unix_ms = Some(unix_ms());
        self.status.phase = None;
        let report = match result {
            Ok(report) => report,
            Err(e) => {
                self.status.state = RunState::Failed;
                self.status.error = Some(e.to_string());
                return;
            }
        };
        let failed = report
            .stopped
            .as_ref()
            .filter(|s| s.kind == StopKind::Failed)
            .map(ToString::to_string);
        self.status.state = match (&failed, self.status.state) {
            (Some(_), _) => RunState::Failed,
            (None, RunState::Stopping) => RunState::Stopped,
            (None, _) => RunState::Finished,
        };
        self.status.error = failed;
        match serde_json::to_value(&report) {
            Ok(json) => self.report = Some(json),
            Err(e) => {
                self.status.state = RunState::Failed;
                self.status.error = Some(format!("encoding the report: {e}"));
            }
        }
    }
}

#[derive(Default)]
struct State {
    runs: BTreeMap<u64, Run>,
    next: u64,
}

/// Runs scenarios posted to the control API with the embedded load generator.
///
/// Targets outside loopback are refused unless the launcher was built with [`Reach::Anywhere`]
/// (the daemon's `--allow-remote`). A posted scenario reads dataset and trace files only from
/// below `data_dir` (the daemon's `--data-dir`; none without one: inline `prompts:` and
/// synthetic datasets still work), regular files of bounded size, read off the async workers.
/// Reports leave per-request records out, so a long run costs bounded memory.
///
/// As `inferscope stress` does, a run whose LLM phases name no model uses the first model of
/// the target's `/v1/models`; a model the target does not list fails the run before any
/// request is sent, with the served models in its error.
pub struct LoadgenLauncher {
    reach: Reach,
    data_dir: Option<PathBuf>,
    tls: TlsOptions,
    otlp: Option<(Arc<OtlpExporter>, Sampler)>,
    state: Arc<Mutex<State>>,
}

impl LoadgenLauncher {
    /// A launcher whose runs connect within `reach`; `data_dir` is the only folder posted
    /// scenarios may read files from.
    #[must_use]
    pub fn new(reach: Reach, data_dir: Option<PathBuf>) -> Self {
        Self {
            reach,
            data_dir,
            tls: TlsOptions::default(),
            otlp: None,
            state: Arc::default(),
        }
    }

    /// The same launcher exporting each run's requests live over OTLP, as `stress
    /// --otlp-endpoint` does (`export::otlp::live`): histograms of every request, spans of
    /// those `sampler` keeps, labelled with the posted scenario's phases.
    #[must_use]
    pub fn with_otlp(mut self, exporter: Arc<OtlpExporter>, sampler: Sampler) -> Self {
        self.otlp = Some((exporter, sampler));
        self
    }

    /// The same launcher checking `https://` targets with `tls` (the daemon's `--ca-file`,
    /// `--insecure`) instead of the system's roots alone.
    #[must_use]
    pub fn with_tls(mut self, tls: TlsOptions) -> Self {
        self.tls = tls;
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Runs `f` (file reads, bounded but possibly slow) without stalling the other tasks of a
/// multi-threaded runtime: `start` is synchronous, so `spawn_blocking` cannot be awaited here,
/// and `block_in_place` hands this worker's queue to another thread meanwhile.
fn off_workers<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

fn key(id: &str) -> Option<u64> {
    id.strip_prefix("run-")?.parse().ok()
}

impl RunLauncher for LoadgenLauncher {
    fn start(&self, text: &str) -> Result<RunHandle, LaunchError> {
        let plan =
            off_workers(|| Plan::from_posted_yaml(text, "scenario", self.data_dir.as_deref()))?;
        let scenario = plan.scenario();
        scenario.target.within(self.reach)?;
        let mut st = self.lock();
        if let Some((n, _)) = st
            .runs
            .iter()
            .find(|(_, r)| matches!(r.status.state, RunState::Running | RunState::Stopping))
        {
            return Err(LaunchError::Busy {
                running: format!("run-{n}"),
            });
        }
        st.next += 1;
        let n = st.next;
        let id = format!("run-{n}");
        let mut end = Duration::ZERO;
        let phases = scenario
            .phases
            .iter()
            .map(|p| {
                end += p.duration;
                (p.name.clone(), end)
            })
            .collect();
        let cancel = CancellationToken::new();
        st.runs.insert(
            n,
            Run {
                status: RunStatus {
                    id: id.clone(),
                    state: RunState::Running,
                    phase: None,
                    started_unix_ms: unix_ms(),
                    finished_unix_ms: None,
                    error: None,
                },
                cancel: cancel.clone(),
                phases,
                started: std::time::Instant::now(),
                report: None,
            },
        );
        while st.runs.len() > KEEP_RUNS {
            st.runs.pop_first();
        }
        drop(st);
        let mut opts = Options {
            reach: self.reach,
            keep_records: false,
            tls: self.tls.clone(),
            ..Options::new()
        };
        if let Some((exporter, sampler)) = &self.otlp {
            // Its task ends with the run (the run's record channel closes).
            let _export = live::attach(Arc::clone(exporter), &plan, Some(*sampler), &mut opts);
        }
        let state = self.state.clone();
        let run_id = id.clone();
        tokio::spawn(async move {
            // A panic must end the run as failed, never leave it `Running` (every later
            // POST would get 409).
            // The run's notes (the model chosen) go to the log under its id.
            let run = loadgen::run(&plan, opts, cancel)
                .instrument(tracing::info_span!("run", id = %run_id));
            let result = AssertUnwindSafe(run)
                .catch_unwind()
                .await
                .unwrap_or_else(|p| {
                    Err(loadgen::RunError::Internal(loadgen::engine::panic_message(
                        &*p,
                    )))
                });
            let mut st = state.lock().unwrap_or_else(PoisonError::into_inner);
            let Some(run) = st.runs.get_mut(&n) else {
                return;
            };
            run.finish(result);
        });
        Ok(RunHandle { id })
    }

    fn status(&self, id: &str) -> Option<RunStatus> {
        let st = self.lock();
        st.runs.get(&key(id)?).map(Run::current)
    }

    fn stop(&self, id: &str) -> Result<RunStatus, LaunchError> {
        let mut st = self.lock();
        let run = key(id)
            .and_then(|n| st.runs.get_mut(&n))
            .ok_or_else(|| LaunchError::NotFound(id.to_owned()))?;
        if run.status.state == RunState::Running {
            run.status.state = RunState::Stopping;
            run.cancel.cancel();
        }
        Ok(run.current())
    }

    fn report(&self, id: &str) -> Option<serde_json::Value> {
        let st = self.lock();
        st.runs.get(&key(id)?)?.report.clone()
    }
}

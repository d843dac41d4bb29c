//! [`MarkingLauncher`] marks the phases of runs posted to the control API on the node's time
//! line, as external load generators do with `POST /api/v1/marks` ([`crate::node::marks`]).

use std::sync::Arc;
use std::time::Duration;

use crate::api::runs::{LaunchError, RunHandle, RunLauncher, RunState, RunStatus};
use crate::clock::unix_ms;
use crate::node::marks::{Mark, Marks};

/// How often a running run's phase is read.
const POLL: Duration = Duration::from_millis(200);

/// A [`RunLauncher`] that marks the phases of the runs it starts on the node's time line: while a
/// run goes, its current phase is pushed as a mark named `run-N.PHASE` (`run-3.baseline`,
/// `run-3.peak`), and `run-N.after` once it ends, so `GET /api/v1/report?phase=run-3.peak`
/// explains it as `stress --explain` would (its `.baseline` phase is the reference).
pub struct MarkingLauncher {
    inner: Arc<dyn RunLauncher>,
    marks: Marks,
}

impl MarkingLauncher {
    /// Wraps `inner`; marks go to `marks` (the node's).
    pub fn new(inner: Arc<dyn RunLauncher>, marks: Marks) -> Self {
        Self { inner, marks }
    }
}

/// The mark for `status` now: its phase while it runs, `.after` once it ended.
fn phase_of(status: &RunStatus) -> Option<String> {
    match status.state {
        RunState::Running | RunState::Stopping => {
            status.phase.as_ref().map(|p| format!("{}.{p}", status.id))
        }
        RunState::Finished | RunState::Stopped | RunState::Failed => {
            Some(format!("{}.after", status.id))
        }
    }
}

impl RunLauncher for MarkingLauncher {
    fn start(&self, scenario: &str) -> Result<RunHandle, LaunchError> {
        let handle = self.inner.start(scenario)?;
        let (inner, marks, id) = (
            Arc::clone(&self.inner),
            self.marks.clone(),
            handle.id.clone(),
        );
        tokio::spawn(async move {
            let mut last: Option<String> = None;
            loop {
                let Some(status) = inner.status(&id) else {
                    return;
                };
                let phase = phase_of(&status);
                if phase.is_some() && phase != last {
                    let mark = Mark {
                        phase: phase.clone().unwrap_or_default(),
                        at_unix_ms: unix_ms(),
                        source: Some("control API".to_owned()),
                        server: None,
                    };
                    if let Err(e) = marks.push(mark) {
                        tracing::warn!("marking {id}: {e}");
                    }
                    last = phase;
                }
                if !matches!(status.state, RunState::Running | RunState::Stopping) {
                    return;
                }
                tokio::time::sleep(POLL).await;
            }
        });
        Ok(handle)
    }

    fn status(&self, id: &str) -> Option<RunStatus> {
        self.inner.status(id)
    }

    fn stop(&self, id: &str) -> Result<RunStatus, LaunchError> {
        self.inner.stop(id)
    }

    fn report(&self, id: &str) -> Option<serde_json::Value> {
        self.inner.report(id)
    }
}

#[cfg(test)]
mod launcher_tests {
    use std::sync::Mutex;

    use super::*;

    /// One run whose phase and state the test moves.
    struct Fake(Mutex<RunStatus>);

    impl RunLauncher for Fake {
        fn start(&self, _: &str) -> Result<RunHandle, LaunchError> {
            Ok(RunHandle { id: "run-1".into() })
        }
        fn status(&self, _: &str) -> Option<RunStatus> {
            Some(self.0.lock().unwrap().clone())
        }
        fn stop(&self, _: &str) -> Result<RunStatus, LaunchError> {
            Err(LaunchError::NotFound("run-1".into()))
        }
        fn report(&self, _: &str) -> Option<serde_json::Value> {
            None
        }
    }

    #[tokio::test]
    async fn a_posted_run_marks_each_phase_and_its_end() {
        let fake = Arc::new(Fake(Mutex::new(RunStatus {
            id: "run-1".into(),
            state: RunState::Running,
            phase: Some("baseline".into()),
            started_unix_ms: 0,
            finished_unix_ms: None,
            error: None,
        })));
        let marks = Marks::default();
        let l = MarkingLauncher::new(fake.clone(), marks.clone());
        assert_eq!(l.start("x").unwrap().id, "run-1");
        tokio::time::sleep(POLL * 2).await;
        fake.0.lock().unwrap().phase = Some("peak".into());
        tokio::time::sleep(POLL * 2).await;
        fake.0.lock().unwrap().state = RunState::Finished;
        tokio::time::sleep(POLL * 2).await;
        let phases: Vec<String> = marks.list().into_iter().map(|m| m.phase).collect();
        assert_eq!(phases, ["run-1.baseline", "run-1.peak", "run-1.after"]);
        assert!(crate::attribute::baseline::is_baseline_name(
            "run-1.baseline"
        ));
    }
}

//! Phase marks from external load generators (k6, guidellm, locust): "from this instant on, my
//! run is in phase X". The time line asks [`Marks::phase_at`] for each window so verdicts are
//! reported per phase of *their* run. [`MarkingLauncher`] marks the phases of runs posted to the
//! control API the same way.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::api::runs::{LaunchError, RunHandle, RunLauncher, RunState, RunStatus};
use crate::clock::unix_ms;

/// Longest phase or source name accepted.
pub const MAX_NAME_LEN: usize = 128;

/// One phase boundary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    /// Phase that starts at `at_unix_ms`.
    pub phase: String,
    /// When it starts, Unix ms.
    pub at_unix_ms: u64,
    /// Who marked it (`k6`, `guidellm`, ...), if said.
    pub source: Option<String>,
}

/// Why a mark was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MarkError {
    /// Empty, too long, or has control characters (they would end up in terminal reports).
    #[error("{field} must be 1-{MAX_NAME_LEN} printable characters")]
    BadName {
        /// `phase` or `source`.
        field: &'static str,
    },
}

fn check(field: &'static str, s: &str) -> Result<(), MarkError> {
    if s.is_empty() || s.chars().count() > MAX_NAME_LEN || s.chars().any(char::is_control) {
        Err(MarkError::BadName { field })
    } else {
        Ok(())
    }
}

/// A bounded, time-ordered list of marks shared by the API (writer) and the time line (reader).
/// When full, the oldest mark is forgotten.
#[derive(Debug, Clone)]
pub struct Marks {
    inner: Arc<Mutex<VecDeque<Mark>>>,
    capacity: usize,
}

impl Default for Marks {
    fn default() -> Self {
        Self::new(4096)
    }
}

impl Marks {
    /// An empty list holding at most `capacity` marks (at least 1).
    #[must_use]
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            inner: Arc::new(Mutex::new(VecDeque::with_capacity(capacity))),
            capacity,
        }
    }

    /// Adds a mark, keeping the list ordered by time (marks may arrive late, with an explicit
    /// time). A mark at the same instant as an existing one replaces it.
    pub fn push(&self, mark: Mark) -> Result<(), MarkError> {
        check("phase", &mark.phase)?;
        if let Some(s) = &mark.source {
            check("source", s)?;
        }
        let mut list = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        match list.binary_search_by_key(&mark.at_unix_ms, |m| m.at_unix_ms) {
            Ok(i) => list[i] = mark,
            Err(i) => list.insert(i, mark),
        }
        while list.len() > self.capacity {
            list.pop_front();
        }
        Ok(())
    }

    /// The phase in force at `unix_ms`: the newest mark at or before it.
    #[must_use]
    pub fn phase_at(&self, unix_ms: u64) -> Option<String> {
        let list = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let i = list.partition_point(|m| m.at_unix_ms <= unix_ms);
        i.checked_sub(1).map(|i| list[i].phase.clone())
    }

    /// All marks, oldest first.
    #[must_use]
    pub fn list(&self) -> Vec<Mark> {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .cloned()
            .collect()
    }
}

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
mod tests {
    use super::*;

    fn mark(phase: &str, at: u64) -> Mark {
        Mark {
            phase: phase.into(),
            at_unix_ms: at,
            source: Some("k6".into()),
        }
    }

    #[test]
    fn phase_is_the_latest_mark_at_or_before() {
        let m = Marks::new(10);
        m.push(mark("peak", 2000)).unwrap();
        m.push(mark("baseline", 1000)).unwrap(); // late, but ordered by time
        assert_eq!(m.phase_at(999), None);
        assert_eq!(m.phase_at(1000).as_deref(), Some("baseline"));
        assert_eq!(m.phase_at(1999).as_deref(), Some("baseline"));
        assert_eq!(m.phase_at(5000).as_deref(), Some("peak"));
        m.push(mark("chaos", 2000)).unwrap();
        assert_eq!(m.phase_at(2000).as_deref(), Some("chaos"));
        assert_eq!(m.list().len(), 2);
    }

    #[test]
    fn bounded_and_validated() {
        let m = Marks::new(3);
        for i in 0..10 {
            m.push(mark(&format!("p{i}"), i * 10)).unwrap();
        }
        let l = m.list();
        assert_eq!(l.len(), 3);
        assert_eq!(l[0].phase, "p7");
        assert_eq!(
            m.push(mark("", 1)),
            Err(MarkError::BadName { field: "phase" })
        );
        assert!(m.push(mark("a\x1b[1Ab", 1)).is_err());
        assert!(m.push(mark(&"x".repeat(MAX_NAME_LEN + 1), 1)).is_err());
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

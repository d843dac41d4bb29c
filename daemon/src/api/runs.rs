//! The seam between the control API and whatever runs load: the embedded load generator in the
//! daemon, or a test double. Methods are synchronous and must not block for long: a launcher
//! spawns its run on the runtime it was called from and returns at once.

use serde::Serialize;

use crate::{dial::OutOfReach, loadgen::PlanError};

/// A started run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunHandle {
    /// The run's id, used in `/api/v1/runs/{id}`.
    pub id: String,
}

/// Where a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Sending load.
    Running,
    /// Stop requested; draining in-flight requests.
    Stopping,
    /// Ran to the end; the report is final.
    Finished,
    /// Stopped on request; the report (of what ran) is final.
    Stopped,
    /// Ended with an error.
    Failed,
}

/// A run's status as the API returns it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunStatus {
    /// The run's id.
    pub id: String,
    /// State.
    pub state: RunState,
    /// Current phase of the scenario, if it has phases.
    pub phase: Option<String>,
    /// Start, Unix ms.
    pub started_unix_ms: u64,
    /// End, Unix ms, once finished.
    pub finished_unix_ms: Option<u64>,
    /// Why it failed.
    pub error: Option<String>,
}

/// Why a launcher refused.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The scenario does not parse or does not validate.
    #[error("invalid scenario: {0}")]
    InvalidScenario(#[from] PlanError),
    /// The scenario's target is outside loopback and the daemon may not load remote services.
    #[error(
        "invalid scenario: target {target} is not a loopback address: start the daemon with --allow-remote to load a remote service"
    )]
    Remote {
        /// The target as written.
        target: String,
    },
    /// Another run is in progress and the launcher runs one at a time.
    #[error("busy: {running} is still running: stop it first (POST /api/v1/runs/{running}/stop)")]
    Busy {
        /// The id of the run in progress.
        running: String,
    },
    /// No run with that id.
    #[error("no run {0}")]
    NotFound(String),
}

impl From<OutOfReach> for LaunchError {
    fn from(e: OutOfReach) -> Self {
        LaunchError::Remote { target: e.url }
    }
}

/// Starts, follows and stops load-generator runs for the API.
pub trait RunLauncher: Send + Sync + 'static {
    /// Starts a run of `scenario` (the text of a scenario file, YAML).
    fn start(&self, scenario: &str) -> Result<RunHandle, LaunchError>;
    /// The run's status, if it exists.
    fn status(&self, id: &str) -> Option<RunStatus>;
    /// Asks the run to stop; returns its status after the request.
    fn stop(&self, id: &str) -> Result<RunStatus, LaunchError>;
    /// The run's report so far (final once the state is `Finished`), as JSON.
    fn report(&self, id: &str) -> Option<serde_json::Value>;
}

//! The routes: runs of the embedded load generator, and phase marks from external ones.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::json;

use crate::api::runs::{LaunchError, RunLauncher};
use crate::clock::unix_ms;
use crate::node::marks::{Mark, Marks};

/// What every handler sees.
pub(crate) struct AppState {
    pub(crate) launcher: Arc<dyn RunLauncher>,
    pub(crate) marks: Marks,
}

pub(crate) fn routes(state: Arc<AppState>, scenario_limit: usize, mark_limit: usize) -> Router {
    Router::new()
        .route(
            "/api/v1/runs",
            post(create_run).layer(DefaultBodyLimit::max(scenario_limit)),
        )
        .route("/api/v1/runs/{id}", get(get_run))
        .route("/api/v1/runs/{id}/stop", post(stop_run))
        .route(
            "/api/v1/marks",
            post(create_mark)
                .get(list_marks)
                .layer(DefaultBodyLimit::max(mark_limit)),
        )
        .with_state(state)
}

fn error(status: StatusCode, msg: impl std::fmt::Display) -> Response {
    (status, Json(json!({ "error": msg.to_string() }))).into_response()
}

fn launch_error(e: &LaunchError) -> Response {
    let status = match e {
        LaunchError::InvalidScenario(_) | LaunchError::Remote { .. } => StatusCode::BAD_REQUEST,
        LaunchError::Busy { .. } => StatusCode::CONFLICT,
        LaunchError::NotFound(_) => StatusCode::NOT_FOUND,
    };
    error(status, e)
}

/// `POST /api/v1/runs`: the body is a scenario file (YAML text).
async fn create_run(State(st): State<Arc<AppState>>, body: String) -> Response {
    if body.trim().is_empty() {
        return error(
            StatusCode::BAD_REQUEST,
            "the body must be a scenario file (YAML)",
        );
    }
    match st.launcher.start(&body) {
        Ok(handle) => {
            let status = st.launcher.status(&handle.id);
            (
                StatusCode::CREATED,
                Json(json!({ "id": handle.id, "status": status })),
            )
                .into_response()
        }
        Err(e) => launch_error(&e),
    }
}

/// `GET /api/v1/runs/{id}`: status and the report so far.
async fn get_run(State(st): State<Arc<AppState>>, Path(id): Path<String>) -> Response {
    match st.launcher.status(&id) {
        Some(status) => {
            let report = st.launcher.report(&id);
            Json(json!({ "status": status, "report": report })).into_response()
        }
        None => launch_error(&LaunchError::NotFound(id)),
    }
}

/// `POST /api/v1/runs/{id}/stop`.
async fn stop_run(State(st): State<Arc<AppState>>, Path(id): Path<String>) -> Response {
    match st.launcher.stop(&id) {
        Ok(status) => Json(json!({ "status": status })).into_response(),
        Err(e) => launch_error(&e),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MarkBody {
    phase: String,
    /// Unix ms; now when absent.
    at: Option<u64>,
    source: Option<String>,
}

/// `POST /api/v1/marks`: `{"phase": "peak", "at": 1700000000000, "source": "k6"}`. The body is
/// parsed as JSON whatever its content type, so a `curl -d` or a k6 `http.post` works as is.
async fn create_mark(State(st): State<Arc<AppState>>, body: Bytes) -> Response {
    let parsed: MarkBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("mark: {e}")),
    };
    let mark = Mark {
        phase: parsed.phase,
        at_unix_ms: parsed.at.unwrap_or_else(unix_ms),
        source: parsed.source,
    };
    match st.marks.push(mark.clone()) {
        Ok(()) => (StatusCode::CREATED, Json(mark)).into_response(),
        Err(e) => error(StatusCode::BAD_REQUEST, e),
    }
}

/// `GET /api/v1/marks`: all marks, oldest first.
async fn list_marks(State(st): State<Arc<AppState>>) -> Response {
    Json(st.marks.list()).into_response()
}

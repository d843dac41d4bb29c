//! The daemon's read endpoints: `/metrics` (Prometheus text) and `/api/v1/timeline` (JSON).
//! The collection loop publishes a [`NodeSnapshot`] after every window; handlers only read it.

use std::sync::Arc;

use axum::{Router, http::header, response::IntoResponse, routing::get};
use serde::Serialize;
use tokio::sync::watch;

use crate::{
    collect::{kernel::Losses, procfs::ProcessInfo, timeline::Timeline},
    probes::HookStatus,
};

/// What the daemon publishes after every window.
#[derive(Serialize, Default)]
pub struct NodeSnapshot {
    /// The watched processes.
    pub processes: Vec<ProcessInfo>,
    /// Every hook and whether it is attached.
    pub hooks: Vec<HookStatus>,
    /// What could not be recorded, kernel and userspace.
    pub losses: Losses,
    /// Why the server's metrics are missing, if they are.
    pub scrape_error: Option<String>,
    /// The time line, oldest window first.
    pub timeline: Option<Timeline>,
    /// `/metrics`, rendered once per window.
    #[serde(skip)]
    pub metrics_text: String,
}

/// Routes serving the latest snapshot.
pub fn routes(rx: watch::Receiver<Arc<NodeSnapshot>>) -> Router {
    let metrics_rx = rx.clone();
    Router::new()
        .route(
            "/metrics",
            get(move || {
                let snap = Arc::clone(&metrics_rx.borrow());
                async move {
                    (
                        [(
                            header::CONTENT_TYPE,
                            crate::export::prometheus::CONTENT_TYPE,
                        )],
                        snap.metrics_text.clone(),
                    )
                }
            }),
        )
        .route(
            "/api/v1/timeline",
            get(move || {
                let snap = Arc::clone(&rx.borrow());
                async move {
                    match serde_json::to_string(&*snap) {
                        Ok(body) => {
                            ([(header::CONTENT_TYPE, "application/json")], body).into_response()
                        }
                        Err(e) => (axum::http::StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
                            .into_response(),
                    }
                }
            }),
        )
}

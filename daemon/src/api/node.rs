//! The daemon's read endpoints, answered by asking the running [`Node`](crate::node::Node):
//!
//! | route | answer |
//! |---|---|
//! | `GET /metrics` | Prometheus text: each server's newest window's signals, `inferscope_verdict{server,cause}`, `inferscope_verdict_confidence{server}`, probes, drops |
//! | `GET /api/v1/timeline` | processes, servers (identity, metrics endpoint, kept time line), probes, losses, failed steps (JSON) |
//! | `GET /api/v1/verdicts?limit=N&server=KEY` | each server's (or `KEY`'s) newest N windows' verdicts with their server, evidence and signals (default 60) |
//! | `GET /api/v1/report?phase=NAME` or `?from=MS&to=MS`, `&server=KEY` | `report.json` of one server's windows, as `stress --explain` writes it |
//! | `GET /api/v1/report.html?...` | the same as a self-contained HTML page |
//!
//! A report covers one server's selected windows and, when a phase is marked `baseline`, that
//! phase's windows of the same server: they are attributed as `stress --explain` attributes a
//! run, against the marked baseline (else the selection's first phase). Without `server` it is
//! the one server that has such windows; several: the answer names them. The report's
//! `target` is the server's key, its title names it.

use std::sync::Arc;

use axum::{
    Json, Router,
    extract::{Query, State},
    http::{StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::{
    attribute::WindowVerdict,
    collect::{
        catalog::Labels,
        identity::{ServerIdentity, ServerKey},
        timeline::Window,
    },
    export::{
        prometheus::{self, DropCounter},
        report::{CallsSeen, Report, ReportError, RunMeta},
    },
    node::{NodeGone, NodeHandle, Selection},
};

/// Drop counters of a stage outside the node (the OTLP export), read at every scrape.
pub type ExtraDrops = Arc<dyn Fn() -> Vec<DropCounter> + Send + Sync>;

/// More Prometheus text for `/metrics` (the trigger rules' counters), read at every scrape.
pub type ExtraMetrics = Arc<dyn Fn() -> String + Send + Sync>;

#[derive(Clone)]
struct St {
    node: NodeHandle,
    extra_drops: Option<ExtraDrops>,
    extra_metrics: Option<ExtraMetrics>,
    show_cmdlines: bool,
}

/// Routes answered by `node`; `/metrics` adds `extra_drops`' counters; `/api/v1/timeline`
/// shows watched processes' full command lines only with `show_cmdlines` (see [`super::redact`]).
pub fn routes(node: NodeHandle, extra_drops: Option<ExtraDrops>, show_cmdlines: bool) -> Router {
    routes_with(node, extra_drops, None, show_cmdlines)
}

/// [`routes`], with `extra_metrics`' text appended to `/metrics`.
pub fn routes_with(
    node: NodeHandle,
    extra_drops: Option<ExtraDrops>,
    extra_metrics: Option<ExtraMetrics>,
    show_cmdlines: bool,
) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/api/v1/timeline", get(timeline))
        .route("/api/v1/verdicts", get(verdicts))
        .route("/api/v1/report", get(report_json))
        .route("/api/v1/report.html", get(report_html))
        .with_state(St {
            node,
            extra_drops,
            extra_metrics,
            show_cmdlines,
        })
}

fn error(status: StatusCode, msg: impl std::fmt::Display) -> Response {
    (status, Json(json!({ "error": msg.to_string() }))).into_response()
}

fn gone(e: NodeGone) -> Response {
    error(StatusCode::SERVICE_UNAVAILABLE, e)
}

async fn metrics(
    State(St {
        node,
        extra_drops,
        extra_metrics,
        ..
    }): State<St>,
) -> Response {
    let latest = match node.latest().await {
        Ok(l) => l,
        Err(e) => return gone(e),
    };
    let mut drops: Vec<DropCounter> = latest
        .status
        .losses
        .labelled()
        .into_iter()
        .map(DropCounter::from)
        .collect();
    // A step of the window loop that failed (and was survived) left that part of a window out.
    drops.extend(
        latest
            .status
            .step_errors
            .iter()
            .map(|(step, n)| DropCounter::new("window_step", *step, *n)),
    );
    if let Some(f) = &extra_drops {
        drops.extend(f());
    }
    let labels: Vec<Labels> = latest
        .servers
        .iter()
        .map(|s| Labels::of_server(&s.identity))
        .collect();
    let series: Vec<prometheus::Series<'_>> = latest
        .servers
        .iter()
        .zip(&labels)
        .map(|(s, labels)| prometheus::Series {
            latest: s.window.as_ref(),
            totals: &s.totals,
            labels,
            verdict: s.verdict.as_ref().map(|v| &v.verdict),
            hops: s.verdict.as_ref().and_then(|v| v.hops.as_ref()),
            orchestration: s.verdict.as_ref().and_then(|v| v.orchestration.as_ref()),
        })
        .collect();
    let text = prometheus::render(&prometheus::Snapshot {
        series: &series,
        probes: &latest.status.hooks,
        drops: &drops,
    });
    let text = match &extra_metrics {
        Some(f) => text + &f(),
        None => text,
    };
    ([(header::CONTENT_TYPE, prometheus::CONTENT_TYPE)], text).into_response()
}

async fn timeline(
    State(St {
        node,
        show_cmdlines,
        ..
    }): State<St>,
) -> Response {
    match node.status(true).await {
        Ok(mut s) => {
            s.processes = s
                .processes
                .into_iter()
                .map(|p| super::redact::process(p, show_cmdlines))
                .collect();
            Json(s).into_response()
        }
        Err(e) => gone(e),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VerdictsQuery {
    limit: Option<usize>,
    server: Option<ServerKey>,
}

/// One window's verdict as `/api/v1/verdicts` lists it.
#[derive(Serialize)]
struct VerdictOut {
    /// The server whose window it is.
    server: ServerIdentity,
    #[serde(flatten)]
    verdict: WindowVerdict,
    /// The window's signals, the evidence's source.
    window: Window,
}

async fn verdicts(
    State(St { node, .. }): State<St>,
    q: Result<Query<VerdictsQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let q = match q {
        Ok(Query(q)) => q,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!(
                    "query: give ?limit=N (a number of windows) and/or ?server=KEY, or nothing ({})",
                    e.body_text()
                ),
            );
        }
    };
    match node.verdicts(q.limit.unwrap_or(60), q.server).await {
        Ok(list) => Json(
            list.into_iter()
                .map(|(server, verdict, window)| VerdictOut {
                    server,
                    verdict,
                    window,
                })
                .collect::<Vec<_>>(),
        )
        .into_response(),
        Err(e) => gone(e),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReportQuery {
    phase: Option<String>,
    from: Option<u64>,
    to: Option<u64>,
    server: Option<ServerKey>,
}

/// What to say to a report query that selects nothing sensible.
const REPORT_USAGE: &str = "give ?phase=NAME, or ?from=MS&to=MS (Unix ms, from < to; to may be left out), and ?server=KEY (port:PORT, pid:PID, pod:UID, ...) when several servers have those windows";

impl ReportQuery {
    fn selection(self) -> Option<(Selection, Option<ServerKey>)> {
        let s = match (self.phase, self.from, self.to) {
            (Some(p), None, None) => Selection::Phase(p),
            (None, Some(from), Some(to)) if from < to => Selection::Range { from, to },
            (None, Some(from), None) => Selection::Range { from, to: u64::MAX },
            _ => return None,
        };
        Some((s, self.server))
    }
}

/// The report of the selected windows, built off the node's task (attribution and rendering
/// take a few ms per hundred windows).
async fn report(node: &NodeHandle, q: ReportQueryResult) -> Result<Report, Response> {
    let (selection, server) = q
        .ok()
        .and_then(|Query(q)| q.selection())
        .ok_or_else(|| error(StatusCode::BAD_REQUEST, REPORT_USAGE))?;
    let name = match &selection {
        Selection::Phase(p) => format!("phase {p}"),
        Selection::Range { from, to } => format!("windows {from}..{to}"),
    };
    let selected = node
        .select(selection, server)
        .await
        .map_err(gone)?
        .map_err(|e| error(StatusCode::NOT_FOUND, e))?;
    tokio::task::spawn_blocking(move || {
        let (start, end) = selected.span_unix_ms;
        let who = &selected.server;
        let title = match who.k8s.as_ref().and_then(|k| k.pod_name.as_deref()) {
            Some(pod) => format!("inferscope daemon: {} ({pod}), {name}", who.server),
            None => format!("inferscope daemon: {}, {name}", who.server),
        };
        let meta = RunMeta::new(&title, &who.server, start, end, selected.timeline.len_ms);
        Report::new(meta, selected.timeline)
            .with_missing_evidence(selected.missing)
            .with_hops(
                selected.called,
                &CallsSeen::Windows {
                    callers: &selected.pids,
                },
            )
    })
    .await
    .map_err(|e| error(StatusCode::INTERNAL_SERVER_ERROR, e))
}

type ReportQueryResult = Result<Query<ReportQuery>, axum::extract::rejection::QueryRejection>;

async fn report_json(State(St { node, .. }): State<St>, q: ReportQueryResult) -> Response {
    render(&node, q, Report::to_json, "application/json").await
}

async fn report_html(State(St { node, .. }): State<St>, q: ReportQueryResult) -> Response {
    render(&node, q, Report::html, "text/html; charset=utf-8").await
}

/// The selected windows' report rendered by `f` (JSON or HTML).
async fn render(
    node: &NodeHandle,
    q: ReportQueryResult,
    f: fn(&Report) -> Result<String, ReportError>,
    content_type: &'static str,
) -> Response {
    let r = match report(node, q).await {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    match f(&r) {
        Ok(body) => ([(header::CONTENT_TYPE, content_type)], body).into_response(),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

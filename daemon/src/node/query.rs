//! Readers of a running [`Node`]: they send a question over its channel and get an answer
//! between two windows. The node owns the servers' time lines; answers are copies.

use std::collections::BTreeMap;

use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use super::{Node, line::Line};
use crate::{
    attribute::{WindowVerdict, baseline::is_baseline_name, hops::Calls},
    collect::{
        catalog::Totals,
        identity::{ServerIdentity, ServerKey},
        kernel::Losses,
        procfs::{self, ProcessInfo},
        timeline::{Timeline, Window},
    },
    probes::HookStatus,
};

/// The node stopped; nothing can be asked any more.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the collection pipeline has stopped")]
pub struct NodeGone;

/// What the processes, probes and collectors are doing (`GET /api/v1/timeline` without the
/// time lines).
#[derive(Debug, Clone, Default, Serialize)]
pub struct NodeStatus {
    /// The watched processes, of every server.
    pub processes: Vec<ProcessInfo>,
    /// The servers with a time line, live or gone.
    pub servers: Vec<ServerStatus>,
    /// Every hook and whether it is attached.
    pub hooks: Vec<HookStatus>,
    /// What could not be recorded, kernel and userspace.
    pub losses: Losses,
    /// Failed steps of the window loop since start, by step (`kernel`, `watch`, `scrape`).
    pub step_errors: BTreeMap<&'static str, u64>,
    /// Evidence missing and why.
    pub missing: Vec<String>,
    /// Windows closed since start.
    pub windows_closed: u64,
}

/// One server: who it is, what is collected of it, and its time line when asked for.
#[derive(Debug, Clone, Serialize)]
pub struct ServerStatus {
    /// Who it is.
    #[serde(flatten)]
    pub identity: ServerIdentity,
    /// Its processes now (empty once gone).
    pub pids: Vec<u32>,
    /// Whether its processes are gone (its time line is kept for reports).
    pub gone: bool,
    /// Its metrics endpoint, when one is scraped.
    pub metrics_url: Option<String>,
    /// Why its metrics are missing, if they are.
    pub scrape_error: Option<String>,
    /// Windows kept.
    pub windows: usize,
    /// The time line, when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeline: Option<Timeline>,
}

/// One live server's newest window with its verdict, and its counters since start.
#[derive(Debug, Clone)]
pub struct ServerLatest {
    /// Who it is.
    pub identity: ServerIdentity,
    /// The newest closed window.
    pub window: Option<Window>,
    /// Its verdict.
    pub verdict: Option<WindowVerdict>,
    /// Counter totals over every closed window.
    pub totals: Totals,
}

/// Every live server's newest window and the node's status: one `/metrics` scrape.
#[derive(Debug, Clone, Default)]
pub struct Latest {
    /// The live servers, by key.
    pub servers: Vec<ServerLatest>,
    /// The node's status.
    pub status: NodeStatus,
}

/// Which windows a report covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// The windows labelled with this phase.
    Phase(String),
    /// The windows starting in `[from, to)`, Unix ms.
    Range {
        /// First instant, Unix ms.
        from: u64,
        /// End (exclusive), Unix ms.
        to: u64,
    },
}

/// The windows a report covers, with the reference it needs.
#[derive(Debug, Clone)]
pub struct Selected {
    /// The server whose windows they are.
    pub server: ServerIdentity,
    /// The marked `baseline` phase's windows (unless selected anyway), then the selected ones,
    /// in time order: attribution compares against the baseline as `stress --explain` does.
    pub timeline: Timeline,
    /// First selected window's start and last one's end, Unix ms.
    pub span_unix_ms: (u64, u64),
    /// Evidence missing and why.
    pub missing: Vec<String>,
    /// The watched servers it called in those windows (a gateway's hops): each one's name and
    /// its windows at the same times.
    pub called: Vec<(String, Timeline)>,
    /// Its processes, whose calls those are.
    pub pids: Vec<u32>,
}

/// Why a selection is empty.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectError {
    /// No server has that key.
    #[error("no server {asked}; servers: {known}")]
    NoServer {
        /// The server asked for.
        asked: String,
        /// The servers there are, comma-separated.
        known: String,
    },
    /// Several servers have windows of the selection and none was named.
    #[error("several servers have these windows: give ?server= one of {servers}")]
    Ambiguous {
        /// Those servers, comma-separated.
        servers: String,
    },
    /// No kept window has that phase.
    #[error("no window of phase {phase:?} is kept; phases on the time line: {known}")]
    NoPhase {
        /// The phase asked for.
        phase: String,
        /// The phases there are, comma-separated.
        known: String,
    },
    /// No kept window starts in the range.
    #[error("no window starts between {from} and {to} (Unix ms); kept: {kept}")]
    NoRange {
        /// From, Unix ms.
        from: u64,
        /// To, Unix ms.
        to: u64,
        /// The kept span.
        kept: String,
    },
}

/// One server's verdict of one window, with the window.
pub type ServerVerdict = (ServerIdentity, WindowVerdict, Window);

pub(super) enum Query {
    Status(bool, oneshot::Sender<NodeStatus>),
    Latest(oneshot::Sender<Latest>),
    Verdicts(
        usize,
        Option<ServerKey>,
        oneshot::Sender<Vec<ServerVerdict>>,
    ),
    Select(
        Selection,
        Option<ServerKey>,
        oneshot::Sender<Result<Selected, SelectError>>,
    ),
}

/// Asks a running [`Node`]. Cheap to clone.
#[derive(Debug, Clone)]
pub struct NodeHandle {
    tx: mpsc::Sender<Query>,
}

impl NodeHandle {
    pub(super) fn new(tx: mpsc::Sender<Query>) -> Self {
        Self { tx }
    }

    async fn ask<T>(&self, q: impl FnOnce(oneshot::Sender<T>) -> Query) -> Result<T, NodeGone> {
        let (tx, rx) = oneshot::channel();
        self.tx.send(q(tx)).await.map_err(|_| NodeGone)?;
        rx.await.map_err(|_| NodeGone)
    }

    /// The processes, probes, collectors and servers; with their whole time lines when
    /// `timeline`.
    pub async fn status(&self, timeline: bool) -> Result<NodeStatus, NodeGone> {
        self.ask(|tx| Query::Status(timeline, tx)).await
    }

    /// Every live server's newest window, its verdict and its totals.
    pub async fn latest(&self) -> Result<Latest, NodeGone> {
        self.ask(Query::Latest).await
    }

    /// The newest `limit` verdicts of each server (of `server` only, when given) with their
    /// windows, server by server, oldest first.
    pub async fn verdicts(
        &self,
        limit: usize,
        server: Option<ServerKey>,
    ) -> Result<Vec<ServerVerdict>, NodeGone> {
        self.ask(|tx| Query::Verdicts(limit, server, tx)).await
    }

    /// The windows of `selection` on `server`'s time line (without one: on the one server
    /// that has such windows), with the baseline they are compared against.
    pub async fn select(
        &self,
        selection: Selection,
        server: Option<ServerKey>,
    ) -> Result<Result<Selected, SelectError>, NodeGone> {
        self.ask(|tx| Query::Select(selection, server, tx)).await
    }
}

impl Node {
    pub(super) fn answer(&mut self, q: Query) {
        // A reader that gave up is no error.
        match q {
            Query::Status(with_timeline, tx) => {
                let _ = tx.send(self.status(with_timeline));
            }
            Query::Latest(tx) => {
                let servers = self
                    .lines
                    .values()
                    .filter(|l| l.gone_at.is_none())
                    .map(|l| ServerLatest {
                        identity: l.identity.clone(),
                        window: l.timeline.windows.last().cloned(),
                        verdict: l.verdicts.back().cloned(),
                        totals: l.totals.clone(),
                    })
                    .collect();
                let _ = tx.send(Latest {
                    servers,
                    status: self.status(false),
                });
            }
            Query::Verdicts(limit, server, tx) => {
                let mut out = Vec::new();
                for l in self.lines.values() {
                    if server.as_ref().is_some_and(|s| !l.key.answers_to(s)) {
                        continue;
                    }
                    let n = l.verdicts.len();
                    out.extend(
                        l.verdicts
                            .iter()
                            .skip(n.saturating_sub(limit))
                            .filter_map(|v| {
                                let w = l.timeline.windows.get(v.index)?.clone();
                                Some((l.identity.clone(), v.clone(), w))
                            }),
                    );
                }
                let _ = tx.send(out);
            }
            Query::Select(s, server, tx) => {
                let _ = tx.send(self.select(&s, server.as_ref()));
            }
        }
    }

    fn status(&self, with_timeline: bool) -> NodeStatus {
        NodeStatus {
            processes: self.watched().into_iter().map(procfs::identity).collect(),
            servers: self
                .lines
                .values()
                .map(|l| ServerStatus {
                    identity: l.identity.clone(),
                    pids: l.pids.clone(),
                    gone: l.gone_at.is_some(),
                    metrics_url: l.scraper.as_ref().map(|(u, _)| u.clone()),
                    scrape_error: l.scrape_error.clone(),
                    windows: l.timeline.windows.len(),
                    timeline: with_timeline.then(|| l.timeline.clone()),
                })
                .collect(),
            hooks: self.session.hooks(),
            losses: self.session.losses(),
            step_errors: self.step_errors.clone(),
            missing: self.session.missing.clone(),
            windows_closed: self.closed,
        }
    }

    /// The other servers `gateway` called in the windows of `selected` (its selection), each
    /// with its windows at those times.
    fn called_by(&self, gateway: &Line, selected: &Timeline) -> Vec<(String, Timeline)> {
        let calls = Calls(Some(&gateway.pids));
        // In time order, as a selection's windows are.
        let at: Vec<u64> = selected.windows.iter().map(|w| w.start_unix_ms).collect();
        self.lines
            .values()
            .filter(|h| h.key != gateway.key)
            .filter_map(|h| {
                let mut t = Timeline::new(selected.origin_unix_ms, h.timeline.len_ms);
                t.windows = (h.timeline.windows.iter())
                    .filter(|w| at.binary_search(&w.start_unix_ms).is_ok())
                    .cloned()
                    .collect();
                let called = t.windows.iter().any(|w| calls.first_token_ms(w).is_some());
                called.then(|| (h.identity.server.clone(), t))
            })
            .collect()
    }

    pub(super) fn select(
        &self,
        s: &Selection,
        server: Option<&ServerKey>,
    ) -> Result<Selected, SelectError> {
        let known = || {
            let k: Vec<String> = self.lines.keys().map(ToString::to_string).collect();
            if k.is_empty() {
                "none yet".to_owned()
            } else {
                k.join(", ")
            }
        };
        let candidates: Vec<&Line> = match server {
            Some(asked) => {
                let l: Vec<&Line> = self
                    .lines
                    .values()
                    .filter(|l| l.key.answers_to(asked))
                    .collect();
                if l.is_empty() {
                    return Err(SelectError::NoServer {
                        asked: asked.to_string(),
                        known: known(),
                    });
                }
                l
            }
            None => self.lines.values().collect(),
        };
        let mut found: Vec<(&Line, Spanned)> = Vec::new();
        let mut first_error = None;
        for l in &candidates {
            match select(&l.timeline, s) {
                Ok(sel) => found.push((l, sel)),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match found.len() {
            0 => Err(first_error.unwrap_or(SelectError::NoServer {
                asked: "with windows".to_owned(),
                known: known(),
            })),
            1 => {
                let (l, (timeline, span_unix_ms)) = found.remove(0);
                Ok(Selected {
                    server: l.identity.clone(),
                    called: self.called_by(l, &timeline),
                    pids: l.pids.clone(),
                    timeline,
                    span_unix_ms,
                    missing: self.session.missing.clone(),
                })
            }
            _ => Err(SelectError::Ambiguous {
                servers: found
                    .iter()
                    .map(|(l, _)| l.key.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }
}

/// A selection's windows with the span of the selected ones, Unix ms.
type Spanned = (Timeline, (u64, u64));

/// The windows of `s` in `t`, after the marked baseline's windows when those are not selected.
fn select(t: &Timeline, s: &Selection) -> Result<Spanned, SelectError> {
    let ws = &t.windows;
    let chosen: Vec<usize> = (0..ws.len())
        .filter(|&i| match s {
            Selection::Phase(p) => ws[i].phase.as_deref() == Some(p.as_str()),
            Selection::Range { from, to } => (*from..*to).contains(&ws[i].start_unix_ms),
        })
        .collect();
    let (Some(&first), Some(&last)) = (chosen.first(), chosen.last()) else {
        return Err(match s {
            Selection::Phase(phase) => {
                let mut known: Vec<&str> = ws.iter().filter_map(|w| w.phase.as_deref()).collect();
                known.dedup();
                known.sort_unstable();
                known.dedup();
                SelectError::NoPhase {
                    phase: phase.clone(),
                    known: if known.is_empty() {
                        "none (POST /api/v1/marks to mark phases)".to_owned()
                    } else {
                        known.join(", ")
                    },
                }
            }
            Selection::Range { from, to } => SelectError::NoRange {
                from: *from,
                to: *to,
                kept: match (ws.first(), ws.last()) {
                    (Some(a), Some(b)) => {
                        format!("{} to {}", a.start_unix_ms, b.start_unix_ms + b.len_ms)
                    }
                    _ => "no window yet".to_owned(),
                },
            },
        });
    };
    // The reference is one baseline phase: the latest that started before the selection (a
    // posted run's own `run-N.baseline`), else the first there is.
    let is_base = |i: &usize| ws[*i].phase.as_deref().is_some_and(is_baseline_name);
    let base = (0..first)
        .rev()
        .find(is_base)
        .or_else(|| (0..ws.len()).find(is_base))
        .and_then(|i| ws[i].phase.as_deref());
    let mut idx: Vec<usize> = (0..ws.len())
        .filter(|&i| base.is_some() && ws[i].phase.as_deref() == base)
        .filter(|i| !chosen.contains(i))
        .collect();
    idx.extend(&chosen);
    idx.sort_unstable();
    let mut out = Timeline::new(ws[idx[0]].start_unix_ms, t.len_ms);
    out.windows = idx.iter().map(|&i| ws[i].clone()).collect();
    out.marks.clone_from(&t.marks);
    Ok((
        out,
        (
            ws[first].start_unix_ms,
            ws[last].start_unix_ms + ws[last].len_ms,
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeline(phases: &[Option<&str>]) -> Timeline {
        let mut t = Timeline::new(1000, 1000);
        for (i, p) in phases.iter().enumerate() {
            t.at(1000 + i as u64 * 1000).phase = p.map(str::to_owned);
        }
        t
    }

    #[test]
    fn a_phase_comes_with_the_baseline_it_is_compared_against() {
        let t = timeline(&[None, Some("baseline"), Some("baseline"), None, Some("peak")]);
        let (sel, span) = select(&t, &Selection::Phase("peak".into())).unwrap();
        let starts: Vec<u64> = sel.windows.iter().map(|w| w.start_unix_ms).collect();
        assert_eq!(starts, [2000, 3000, 5000]);
        assert_eq!(span, (5000, 6000));
        let (sel, _) = select(&t, &Selection::Phase("baseline".into())).unwrap();
        assert_eq!(sel.windows.len(), 2);
        let (sel, span) = select(
            &t,
            &Selection::Range {
                from: 3500,
                to: 6000,
            },
        )
        .unwrap();
        assert_eq!(sel.windows.len(), 4, "baseline, then 4000 and 5000");
        assert_eq!(span, (4000, 6000));
    }

    #[test]
    fn the_reference_is_the_latest_baseline_before_the_selection() {
        let t = timeline(&[
            Some("baseline"),
            Some("peak"),
            Some("run-1.baseline"),
            Some("run-1.peak"),
        ]);
        // The phases of the windows a report of `phase` covers.
        let covered = |phase: &str| -> Vec<String> {
            let (sel, _) = select(&t, &Selection::Phase(phase.into())).unwrap();
            sel.windows.into_iter().filter_map(|w| w.phase).collect()
        };
        assert_eq!(covered("run-1.peak"), ["run-1.baseline", "run-1.peak"]);
        assert_eq!(covered("peak"), ["baseline", "peak"]);
    }

    #[test]
    fn an_empty_selection_says_what_there_is() {
        let t = timeline(&[Some("baseline"), Some("peak")]);
        let e = select(&t, &Selection::Phase("chaos".into())).unwrap_err();
        assert_eq!(
            e.to_string(),
            "no window of phase \"chaos\" is kept; phases on the time line: baseline, peak"
        );
        let e = select(
            &Timeline::new(0, 1000),
            &Selection::Range { from: 0, to: 5 },
        )
        .unwrap_err();
        assert!(e.to_string().ends_with("kept: no window yet"), "{e}");
    }
}

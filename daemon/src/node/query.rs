//! Readers of a running [`Node`]: they send a question over its channel and get an answer
//! between two windows. The node owns the time line; answers are copies.

use std::collections::BTreeMap;

use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use super::Node;
use crate::{
    attribute::{WindowVerdict, baseline::is_baseline_name},
    collect::{
        catalog::Totals,
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
/// time line).
#[derive(Debug, Clone, Default, Serialize)]
pub struct NodeStatus {
    /// The watched processes.
    pub processes: Vec<ProcessInfo>,
    /// Every hook and whether it is attached.
    pub hooks: Vec<HookStatus>,
    /// What could not be recorded, kernel and userspace.
    pub losses: Losses,
    /// Why the server's metrics are missing, if they are.
    pub scrape_error: Option<String>,
    /// Failed steps of the window loop since start, by step (`kernel`, `watch`, `scrape`).
    pub step_errors: BTreeMap<&'static str, u64>,
    /// Evidence missing and why.
    pub missing: Vec<String>,
    /// Windows closed since start.
    pub windows_closed: u64,
    /// The time line, when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeline: Option<Timeline>,
}

/// The newest window with its verdict, and the counters since start: one `/metrics` scrape.
#[derive(Debug, Clone, Default)]
pub struct Latest {
    /// The newest closed window.
    pub window: Option<Window>,
    /// Its verdict.
    pub verdict: Option<WindowVerdict>,
    /// Counter totals over every closed window.
    pub totals: Totals,
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
    /// The marked `baseline` phase's windows (unless selected anyway), then the selected ones,
    /// in time order: attribution compares against the baseline as `stress --explain` does.
    pub timeline: Timeline,
    /// First selected window's start and last one's end, Unix ms.
    pub span_unix_ms: (u64, u64),
    /// Evidence missing and why.
    pub missing: Vec<String>,
}

/// Why a selection is empty.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectError {
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

pub(super) enum Query {
    Status(bool, oneshot::Sender<NodeStatus>),
    Latest(oneshot::Sender<Latest>),
    Verdicts(usize, oneshot::Sender<Vec<(WindowVerdict, Window)>>),
    Select(Selection, oneshot::Sender<Result<Selected, SelectError>>),
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

    /// The processes, probes and collectors; with the whole time line when `timeline`.
    pub async fn status(&self, timeline: bool) -> Result<NodeStatus, NodeGone> {
        self.ask(|tx| Query::Status(timeline, tx)).await
    }

    /// The newest window, its verdict and the totals.
    pub async fn latest(&self) -> Result<Latest, NodeGone> {
        self.ask(Query::Latest).await
    }

    /// The newest `limit` verdicts with their windows, oldest first.
    pub async fn verdicts(&self, limit: usize) -> Result<Vec<(WindowVerdict, Window)>, NodeGone> {
        self.ask(|tx| Query::Verdicts(limit, tx)).await
    }

    /// The windows of `selection`, with the baseline they are compared against.
    pub async fn select(
        &self,
        selection: Selection,
    ) -> Result<Result<Selected, SelectError>, NodeGone> {
        self.ask(|tx| Query::Select(selection, tx)).await
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
                let _ = tx.send(Latest {
                    window: self.timeline.windows.last().cloned(),
                    verdict: self.verdicts.back().cloned(),
                    totals: self.totals.clone(),
                    status: self.status(false),
                });
            }
            Query::Verdicts(limit, tx) => {
                let n = self.verdicts.len();
                let out = self
                    .verdicts
                    .iter()
                    .skip(n.saturating_sub(limit))
                    .filter_map(|v| Some((v.clone(), self.timeline.windows.get(v.index)?.clone())))
                    .collect();
                let _ = tx.send(out);
            }
            Query::Select(s, tx) => {
                let _ = tx.send(self.select(&s));
            }
        }
    }

    fn status(&self, with_timeline: bool) -> NodeStatus {
        NodeStatus {
            processes: self
                .session
                .servers()
                .into_iter()
                .map(procfs::identity)
                .collect(),
            hooks: self.session.hooks(),
            losses: self.session.losses(),
            scrape_error: self.session.scrape_error(),
            step_errors: self.step_errors.clone(),
            missing: self.session.missing.clone(),
            windows_closed: self.closed,
            timeline: with_timeline.then(|| self.timeline.clone()),
        }
    }

    fn select(&self, s: &Selection) -> Result<Selected, SelectError> {
        select(&self.timeline, s).map(|(timeline, span_unix_ms)| Selected {
            timeline,
            span_unix_ms,
            missing: self.session.missing.clone(),
        })
    }
}

/// The windows of `s` in `t`, after the marked baseline's windows when those are not selected.
fn select(t: &Timeline, s: &Selection) -> Result<(Timeline, (u64, u64)), SelectError> {
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

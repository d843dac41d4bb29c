//! The one collection pipeline: [`Node`] starts the collectors, closes a window every window
//! length, labels it with the phase an external generator marked, attributes it as it closes,
//! and owns the time line. Readers (the HTTP routes, a finished `stress --explain` run) ask it
//! over a channel through a [`NodeHandle`]; nothing else holds the time line.
//!
//! ```no_run
//! # async fn demo() {
//! use std::time::Duration;
//! use inferscope::{collect::session::SessionOptions, node::{Node, NodeOptions}};
//! let (node, handle) = Node::start(NodeOptions::new(SessionOptions {
//!     servers: vec![1234],
//!     loadgen: None,
//!     cuda_targets: Vec::new(),
//!     kernel_without_servers: true,
//!     metrics_url: Some("http://127.0.0.1:8000/metrics".into()),
//!     tls: Default::default(),
//!     window: Duration::from_secs(1),
//! }));
//! let task = tokio::spawn(node.run(tokio::time::sleep(Duration::from_secs(10))));
//! let recent = handle.verdicts(10).await.unwrap();
//! let finished = task.await.unwrap();
//! # let _ = (recent, finished);
//! # }
//! ```

pub mod marks;
mod query;

use std::{
    collections::{BTreeMap, VecDeque},
    future::Future,
    pin::Pin,
    time::{Duration, Instant},
};

use tokio::sync::{mpsc, oneshot};

pub use query::{Latest, NodeGone, NodeHandle, NodeStatus, SelectError, Selected, Selection};

use crate::{
    attribute::{WindowVerdict, rolling},
    collect::{
        catalog::Totals,
        session::{ServerSide, Session, SessionOptions},
        timeline::{Timeline, Window},
    },
};

use marks::Marks;

/// How long the node waits, once the load has stopped, for the kernel events still on their
/// way from the ring buffers.
const FINAL_EVENTS: std::time::Duration = std::time::Duration::from_millis(100);
/// Windows whose phase is taken from the marks again at every tick, so a mark posted up to this
/// many windows late (with its own `at`) still labels them.
const RELABEL_WINDOWS: usize = 60;

/// Finds the server processes to watch now (the daemon's `--port`/`--name`/`--pid`).
pub type Discover = Box<dyn FnMut() -> Vec<u32> + Send>;

/// Called with every closed window and its verdict (e.g. the OTLP export).
pub type Observer = Box<dyn FnMut(&Window, &WindowVerdict) + Send>;

/// Finds the metrics endpoint of the server processes watched (the daemon without
/// `--metrics-url`): asked at the start and whenever the set changes; the URL it answers with
/// is scraped from then on.
pub type FindMetrics =
    Box<dyn FnMut(Vec<u32>) -> Pin<Box<dyn Future<Output = Option<String>> + Send>> + Send>;

/// How the node runs.
pub struct NodeOptions {
    /// What to collect.
    pub session: SessionOptions,
    /// Windows kept; older ones are dropped.
    pub keep: usize,
    /// Phase marks from external load generators; each window takes the phase in force at
    /// its start.
    pub marks: Option<Marks>,
    /// Re-discovers the servers every `rediscover_every` windows.
    pub discover: Option<Discover>,
    /// Windows between two discoveries.
    pub rediscover_every: u64,
    /// Keep the kernel's exchanges for joins with load-generator records (`stress
    /// --explain`); the daemon has none to join and forgets them every window.
    pub keep_joins: bool,
    /// Called as each window closes.
    pub observers: Vec<Observer>,
    /// Finds the servers' metrics endpoint when `session.metrics_url` names none.
    pub find_metrics: Option<FindMetrics>,
}

impl NodeOptions {
    /// Defaults: keep 3600 windows, no marks, no discovery, keep joins.
    #[must_use]
    pub fn new(session: SessionOptions) -> Self {
        Self {
            session,
            keep: 3600,
            marks: None,
            discover: None,
            rediscover_every: 10,
            keep_joins: true,
            observers: Vec::new(),
            find_metrics: None,
        }
    }
}

/// What a node leaves when it stops.
pub struct Finished {
    /// The time line (the kept windows).
    pub timeline: Timeline,
    /// The verdict of each kept window, as it closed.
    pub verdicts: Vec<WindowVerdict>,
    /// The kernel's view of the server's connections, for joins.
    pub server_side: ServerSide,
    /// Evidence that was missing and why.
    pub missing: Vec<String>,
}

/// The collectors and the time line they fill; see the module docs.
pub struct Node {
    session: Session,
    timeline: Timeline,
    verdicts: VecDeque<WindowVerdict>,
    /// Windows closed so far.
    closed: u64,
    /// Start of the first window, Unix ms.
    origin_unix_ms: u64,
    last_tick: Instant,
    opts: NodeOptions,
    totals: Totals,
    /// Failed steps of the window loop, by step.
    step_errors: BTreeMap<&'static str, u64>,
    last_step_error: Option<String>,
    rx: mpsc::Receiver<query::Query>,
    /// The answer of [`NodeOptions::find_metrics`] asked last, until it comes.
    finding: Option<oneshot::Receiver<Option<String>>>,
}

impl Node {
    /// Starts the collectors (needs a tokio runtime); the time line starts now.
    #[must_use]
    pub fn start(opts: NodeOptions) -> (Self, NodeHandle) {
        let session = Session::start(&opts.session);
        let (tx, rx) = mpsc::channel(16);
        let len = opts.session.window.as_millis().max(1) as u64;
        let origin_unix_ms = crate::clock::unix_ms();
        let node = Self {
            session,
            timeline: Timeline::new(origin_unix_ms, len),
            verdicts: VecDeque::new(),
            closed: 0,
            origin_unix_ms,
            last_tick: Instant::now(),
            opts,
            totals: Totals::default(),
            step_errors: BTreeMap::new(),
            last_step_error: None,
            rx,
            finding: None,
        };
        let mut node = node;
        let servers = node.session.servers();
        node.find_metrics(servers);
        (node, NodeHandle::new(tx))
    }

    /// Evidence missing so far (probes that did not attach, collectors that did not start).
    #[must_use]
    pub fn missing(&self) -> &[String] {
        &self.session.missing
    }

    /// The collectors, to report what started.
    #[must_use]
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Closes a window every window length and answers readers until `shutdown` completes;
    /// then closes the window it stopped in when at least half of it ran, and stops the
    /// collectors.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> Finished {
        let len = self.opts.session.window;
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + len, len);
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                _ = tick.tick() => self.tick(),
                Some(q) = self.rx.recv() => self.answer(q),
            }
        }
        // The ring-buffer readers deliver what the kernel reported as the load stopped (each
        // pooled connection's last exchange is reported when it closes) before the last drain.
        tokio::time::sleep(FINAL_EVENTS).await;
        self.close_tail();
        let server_side = self.session.finish();
        Finished {
            timeline: self.timeline,
            verdicts: self.verdicts.into(),
            server_side,
            missing: self.session.missing,
        }
    }

    /// Closes the next window. Counted, not read from the clock: a tick a millisecond early or
    /// late must neither close one window twice nor skip one (an empty window reads as missing
    /// evidence).
    fn tick(&mut self) {
        self.closed += 1;
        self.last_tick = Instant::now();
        if self
            .closed
            .is_multiple_of(self.opts.rediscover_every.max(1))
            && let Some(discover) = self.opts.discover.as_mut()
        {
            let now = discover();
            let was = self.session.servers();
            if now != was {
                let pids = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
                tracing::info!(
                    servers = pids(&now),
                    was = pids(&was),
                    "the server processes changed; watching the new set"
                );
                if let Err(e) = self.session.watch(now.clone()) {
                    self.count(&e);
                }
                self.find_metrics(now);
            }
        }
        self.take_found_metrics();
        let t = &mut self.timeline;
        // From the first origin: `retain_last` moves the time line's own origin forward.
        let at = self.origin_unix_ms + (self.closed - 1) * t.len_ms + t.len_ms / 2;
        t.at(at);
        if let Some(m) = &self.opts.marks {
            // A mark may arrive late with an explicit `at`: the recent windows take the phase
            // in force at their start again.
            let n = t.windows.len();
            for w in &mut t.windows[n.saturating_sub(RELABEL_WINDOWS)..] {
                w.phase = m.phase_at(w.start_unix_ms);
            }
        }
        let w = t.at(at);
        let errors = self.session.close_window(w);
        self.totals.add(w);
        for e in &errors {
            self.count(e);
        }
        if !self.opts.keep_joins {
            self.session.forget_joins();
        }
        let index = self.timeline.index(at);
        let Some(v) = rolling::verdict_at(&self.timeline, index) else {
            return;
        };
        let w = &self.timeline.windows[index];
        for o in &mut self.opts.observers {
            o(w, &v);
        }
        // Windows `at` created for a skipped tick get no verdict; the list follows the windows.
        while self.verdicts.len() + 1 < self.timeline.windows.len() {
            let i = self.verdicts.len();
            let skipped = rolling::verdict_at(&self.timeline, i);
            self.verdicts.extend(skipped);
        }
        self.verdicts.push_back(v);
        let keep = self.opts.keep.max(1);
        self.timeline.retain_last(keep);
        while self.verdicts.len() > self.timeline.windows.len() {
            self.verdicts.pop_front();
        }
        // Verdict indices follow the kept windows.
        for (i, v) in self.verdicts.iter_mut().enumerate() {
            v.index = i;
        }
    }

    /// Asks [`NodeOptions::find_metrics`] (when set and no URL was given) where `servers`
    /// export their metrics; the answer is taken at a later tick.
    fn find_metrics(&mut self, servers: Vec<u32>) {
        if self.opts.session.metrics_url.is_some() || servers.is_empty() {
            return;
        }
        let Some(find) = self.opts.find_metrics.as_mut() else {
            return;
        };
        let (tx, rx) = oneshot::channel();
        let fut = find(servers);
        tokio::spawn(async move {
            let _ = tx.send(fut.await);
        });
        self.finding = Some(rx);
    }

    /// Scrapes the URL [`Node::find_metrics`] found, once it is known.
    fn take_found_metrics(&mut self) {
        let Some(rx) = self.finding.as_mut() else {
            return;
        };
        match rx.try_recv() {
            Err(oneshot::error::TryRecvError::Empty) => {}
            Err(oneshot::error::TryRecvError::Closed) | Ok(None) => self.finding = None,
            Ok(Some(url)) => {
                self.finding = None;
                if self.session.scraping() != Some(url.as_str()) {
                    tracing::info!("scraping {url}");
                    if let Err(e) = self.session.scrape(&url) {
                        self.count(&e);
                    }
                }
            }
        }
    }

    /// Counts a failed step and logs it when its message changes (a server that is down
    /// fails every scrape; one line says so).
    fn count(&mut self, e: &crate::collect::session::StepError) {
        *self.step_errors.entry(e.step()).or_default() += 1;
        let msg = e.to_string();
        if self.last_step_error.as_ref() != Some(&msg) {
            tracing::warn!("window {}: {msg}; collection goes on", self.closed);
            if matches!(e, crate::collect::session::StepError::Kernel(_)) {
                self.session.missing.push(msg.clone());
            }
            self.last_step_error = Some(msg);
        }
    }

    fn close_tail(&mut self) {
        if self.last_tick.elapsed() * 2 >= Duration::from_millis(self.timeline.len_ms) {
            self.tick();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::marks::Mark;
    use super::*;
    use crate::attribute::Cause;

    /// A node without collectors (no server, no metrics URL): windows are closed empty.
    fn node(marks: Marks, keep: usize) -> (Node, NodeHandle) {
        let mut opts = NodeOptions::new(SessionOptions {
            servers: Vec::new(),
            loadgen: None,
            cuda_targets: Vec::new(),
            kernel_without_servers: false,
            metrics_url: None,
            tls: crate::tls::TlsOptions::default(),
            window: Duration::from_millis(100),
        });
        opts.marks = Some(marks);
        opts.keep = keep;
        Node::start(opts)
    }

    fn mark(phase: &str, at_unix_ms: u64) -> Mark {
        Mark {
            phase: phase.into(),
            at_unix_ms,
            source: None,
        }
    }

    #[tokio::test]
    async fn windows_close_in_order_with_verdicts_phases_and_a_bound() {
        let marks = Marks::default();
        let (mut n, _handle) = node(marks.clone(), 4);
        let origin = n.timeline.origin_unix_ms;
        marks.push(mark("baseline", origin)).unwrap();
        for _ in 0..3 {
            n.tick();
        }
        // Posted late, for the third window on: the recent windows are labelled again.
        marks.push(mark("peak", origin + 200)).unwrap();
        for _ in 0..3 {
            n.tick();
        }
        assert_eq!(n.closed, 6);
        let starts: Vec<u64> = n.timeline.windows.iter().map(|w| w.start_unix_ms).collect();
        assert_eq!(
            starts,
            [200, 300, 400, 500].map(|d| origin + d),
            "kept the newest 4"
        );
        let phases: Vec<Option<&str>> = n
            .timeline
            .windows
            .iter()
            .map(|w| w.phase.as_deref())
            .collect();
        assert_eq!(phases, [Some("peak"); 4]);
        assert_eq!(n.verdicts.len(), 4);
        for (i, v) in n.verdicts.iter().enumerate() {
            assert_eq!(v.index, i);
            assert_eq!(v.start_unix_ms, starts[i]);
            // Empty windows: no latency rose, nothing named.
            assert_eq!(v.verdict.cause, Cause::None);
        }
        assert!(n.missing().iter().any(|m| m.contains("no server process")));
    }

    // Paused time: the node's window timer advances as the test sleeps, without waiting.
    #[tokio::test(start_paused = true)]
    async fn readers_ask_the_running_node_and_get_its_time_line() {
        let (n, handle) = node(Marks::default(), 100);
        let stop = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn(n.run(stop.clone().cancelled_owned()));
        tokio::time::sleep(Duration::from_millis(350)).await;
        let latest = handle.latest().await.unwrap();
        assert!(latest.window.is_some() && latest.verdict.is_some());
        let status = handle.status(true).await.unwrap();
        assert!(status.windows_closed >= 2, "{}", status.windows_closed);
        assert_eq!(
            status.timeline.unwrap().windows.len() as u64,
            status.windows_closed
        );
        assert_eq!(handle.verdicts(2).await.unwrap().len(), 2);
        let e = handle
            .select(Selection::Phase("peak".into()))
            .await
            .unwrap()
            .unwrap_err();
        assert!(e.to_string().contains("POST /api/v1/marks"), "{e}");
        stop.cancel();
        let finished = task.await.unwrap();
        assert_eq!(finished.verdicts.len(), finished.timeline.windows.len());
        assert_eq!(handle.latest().await.unwrap_err(), NodeGone);
    }
}

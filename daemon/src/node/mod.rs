//! The one collection pipeline: [`Node`] starts the collectors, splits what they see by server
//! (a pod, a container, a listening process: [`Grouping`]), closes a window of every server's
//! own time line every window length, labels it with the phase an external generator marked,
//! attributes it as it closes against that server's own baseline, and owns the time lines.
//! Readers (the HTTP routes, a finished `stress --explain` run) ask it over a channel through
//! a [`NodeHandle`]; nothing else holds a time line.
//!
//! Memory: a server's time line keeps [`NodeOptions::keep`] windows and their verdicts, and
//! at most [`NodeOptions::max_servers`] servers are kept (live or gone), so the time lines
//! hold at most `max_servers x keep` windows (the daemon: 16 x 3600, about 115 MiB at most).
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
//! let recent = handle.verdicts(10, None).await.unwrap();
//! let finished = task.await.unwrap();
//! # let _ = (recent, finished);
//! # }
//! ```

mod line;
pub mod marks;
mod query;

use std::{
    collections::{BTreeMap, BTreeSet},
    future::Future,
    pin::Pin,
    time::{Duration, Instant},
};

use tokio::sync::{mpsc, oneshot};

pub use query::{
    Latest, NodeGone, NodeHandle, NodeStatus, SelectError, Selected, Selection, ServerLatest,
    ServerStatus,
};

use crate::{
    attribute::WindowVerdict,
    collect::{
        cgroup::Container,
        discover,
        identity::{self, K8sIdentity, ServerIdentity, ServerKey, Servers},
        session::{ServerSide, Session, SessionOptions, StepError},
        timeline::{Part, Timeline, Window},
    },
};

use line::Line;
use marks::Marks;

/// Finds the server processes to watch now (the daemon's `--port`/`--name`/`--pid`).
pub type Discover = Box<dyn FnMut() -> Vec<u32> + Send>;

/// Called with every closed window of every server, its verdict and the server's identity
/// (e.g. the OTLP export, trigger rules).
pub type Observer = Box<dyn FnMut(&ServerIdentity, &Window, &WindowVerdict) + Send>;

/// Finds the metrics endpoint of one server's processes (the daemon without `--metrics-url`):
/// asked for each server when it is found and when its processes change; the URL it answers
/// with is scraped into that server's time line from then on.
pub type FindMetrics =
    Box<dyn FnMut(Vec<u32>) -> Pin<Box<dyn Future<Output = Option<String>> + Send>> + Send>;

/// Names a pod's container (the pod list of the node, when it can be read).
pub type NamePods = Box<dyn FnMut(&Container) -> Option<K8sIdentity> + Send>;

/// How the watched processes are split into servers, each with its own time line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grouping {
    /// Every watched process is one server, the run's target (`stress --explain`).
    Target,
    /// Each pod, container, listener or lone process is a server (the daemon;
    /// [`identity::Place::key`]).
    PerServer,
}

/// Servers kept at most by default (with their time lines); see [`NodeOptions::max_servers`].
/// A window with its verdict takes about 2 KiB (952 bytes inline, the verdict's evidence on
/// the heap), so 16 servers of 3600 windows hold at most about 115 MiB; one server about 7 MiB.
pub const MAX_SERVERS: usize = 16;

/// How the node runs.
pub struct NodeOptions {
    /// What to collect.
    pub session: SessionOptions,
    /// How the processes are split into servers.
    pub grouping: Grouping,
    /// Windows kept per server; older ones are dropped.
    pub keep: usize,
    /// Servers kept at most, live or gone: a new server past it replaces the one gone longest,
    /// or is not watched (and logged) while all are live. Memory is bounded by
    /// `max_servers x keep` windows.
    pub max_servers: usize,
    /// Phase marks from external load generators; each window takes the phase in force at
    /// its start (for its server).
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
    /// Finds a server's metrics endpoint when `session.metrics_url` is not its own.
    pub find_metrics: Option<FindMetrics>,
    /// Names pods' containers; without it they are named by their UIDs.
    pub name_pods: Option<NamePods>,
}

impl NodeOptions {
    /// Defaults: one target, keep 3600 windows, [`MAX_SERVERS`], no marks, no discovery, keep
    /// joins.
    #[must_use]
    pub fn new(session: SessionOptions) -> Self {
        Self {
            session,
            grouping: Grouping::Target,
            keep: 3600,
            max_servers: MAX_SERVERS,
            marks: None,
            discover: None,
            rediscover_every: 10,
            keep_joins: true,
            observers: Vec::new(),
            find_metrics: None,
            name_pods: None,
        }
    }
}

/// What a node leaves when it stops.
pub struct Finished {
    /// The time line of the first server (the target, with [`Grouping::Target`]).
    pub timeline: Timeline,
    /// The verdict of each of its kept windows, as it closed.
    pub verdicts: Vec<WindowVerdict>,
    /// The kernel's view of the servers' connections, for joins.
    pub server_side: ServerSide,
    /// Evidence that was missing and why.
    pub missing: Vec<String>,
    /// Servers that had a time line when it stopped.
    pub servers: usize,
}

/// The collectors and the servers' time lines they fill; see the module docs.
pub struct Node {
    session: Session,
    /// One time line per server.
    lines: BTreeMap<ServerKey, Line>,
    /// Windows closed so far.
    closed: u64,
    /// Start of the first window, Unix ms.
    origin_unix_ms: u64,
    last_tick: Instant,
    opts: NodeOptions,
    /// Failed steps of the window loop, by step.
    step_errors: BTreeMap<&'static str, u64>,
    last_step_error: Option<String>,
    /// Servers found but not watched (the cap was reached), said once each.
    refused: BTreeSet<ServerKey>,
    rx: mpsc::Receiver<query::Query>,
}

impl Node {
    /// Starts the collectors (needs a tokio runtime); the time lines start now.
    #[must_use]
    pub fn start(opts: NodeOptions) -> (Self, NodeHandle) {
        let session = Session::start(&opts.session);
        let (tx, rx) = mpsc::channel(16);
        let origin_unix_ms = crate::clock::unix_ms();
        let servers = opts.session.servers.clone();
        let mut node = Self {
            session,
            lines: BTreeMap::new(),
            closed: 0,
            origin_unix_ms,
            last_tick: Instant::now(),
            opts,
            step_errors: BTreeMap::new(),
            last_step_error: None,
            refused: BTreeSet::new(),
            rx,
        };
        node.regroup(&servers);
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

    /// The servers with a time line now, by identity.
    #[must_use]
    pub fn servers(&self) -> Vec<ServerIdentity> {
        self.lines.values().map(|l| l.identity.clone()).collect()
    }

    fn len_ms(&self) -> u64 {
        self.opts.session.window.as_millis().max(1) as u64
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
        self.close_tail();
        for line in self.lines.values() {
            if let Some(e) = &line.scrape_error {
                self.session.missing.push(match line.key {
                    ServerKey::Target => format!("server metrics: last scrape failed: {e}"),
                    ref k => format!("server metrics of {k}: last scrape failed: {e}"),
                });
            }
        }
        let server_side = self.session.finish();
        let servers = self.lines.len();
        let (timeline, verdicts) = self.lines.into_values().next().map_or_else(
            || (Timeline::new(self.origin_unix_ms, 1), Vec::new()),
            |l| (l.timeline, l.verdicts.into()),
        );
        Finished {
            timeline,
            verdicts,
            server_side,
            missing: self.session.missing,
            servers,
        }
    }

    /// Closes the next window of every live server. Counted, not read from the clock: a tick
    /// a millisecond early or late must neither close one window twice nor skip one (an
    /// empty window reads as missing evidence).
    fn tick(&mut self) {
        self.closed += 1;
        self.last_tick = Instant::now();
        if self
            .closed
            .is_multiple_of(self.opts.rediscover_every.max(1))
            && let Some(discover) = self.opts.discover.as_mut()
        {
            let now = discover();
            self.regroup(&now);
        }
        self.take_found_metrics();
        let len_ms = self.len_ms();
        // From the first origin: `retain_last` moves a time line's own origin forward.
        let at = self.origin_unix_ms + (self.closed - 1) * len_ms + len_ms / 2;
        let marks = self.opts.marks.as_ref();
        let live = |l: &&mut Line| l.gone_at.is_none();
        for l in self.lines.values_mut().filter(live) {
            l.open(at, marks);
        }
        let mut parts: Vec<Part<'_>> = self
            .lines
            .values_mut()
            .filter(live)
            .map(|l| Part {
                pids: &l.pids,
                window: l.timeline.at(at),
            })
            .collect();
        let errors = self.session.close_windows(&mut parts);
        drop(parts);
        let mut scrape_errors = Vec::new();
        for l in self.lines.values_mut().filter(|l| l.gone_at.is_none()) {
            if let Some(e) = l.scrape_into(at) {
                scrape_errors.push(StepError::Scrape(format!("{}: {e}", l.key)));
            }
        }
        for e in errors.iter().chain(&scrape_errors) {
            self.count(e);
        }
        if !self.opts.keep_joins {
            self.session.forget_joins();
        }
        let keep = self.opts.keep;
        for l in self.lines.values_mut().filter(|l| l.gone_at.is_none()) {
            let Some((index, v)) = l.close(at, keep) else {
                continue;
            };
            let w = &l.timeline.windows[index];
            for o in &mut self.opts.observers {
                o(&l.identity, w, &v);
            }
        }
    }

    /// Splits `pids` into servers and updates the time lines: new servers get one (within
    /// [`NodeOptions::max_servers`]), servers whose processes changed are watched anew,
    /// servers not found any more are marked gone (their time lines stay, for reports).
    fn regroup(&mut self, pids: &[u32]) {
        let found: Servers = match self.opts.grouping {
            Grouping::Target => {
                let mut pids = pids.to_vec();
                pids.sort_unstable();
                pids.dedup();
                BTreeMap::from([(
                    ServerKey::Target,
                    identity::Found {
                        pids,
                        container: None,
                    },
                )])
            }
            Grouping::PerServer => identity::group_on_host(pids),
        };
        let was: Vec<u32> = self.watched();
        let mut changed = Vec::new();
        for (key, l) in &mut self.lines {
            if l.gone_at.is_none() && !found.contains_key(key) {
                l.gone_at = Some(self.closed);
                l.pids.clear();
                l.scraper = None;
                tracing::info!(server = %key, "server gone; its time line is kept for reports");
            }
        }
        for (key, f) in &found {
            match self.lines.get_mut(key) {
                Some(l) if l.pids == f.pids && l.gone_at.is_none() => {}
                Some(l) => {
                    l.pids.clone_from(&f.pids);
                    l.gone_at = None;
                    changed.push(key.clone());
                }
                None => {
                    if self.make_room() {
                        let len_ms = self.len_ms();
                        // Its time line starts with the window being closed.
                        let start = self.origin_unix_ms + self.closed.saturating_sub(1) * len_ms;
                        let line = Line::new(
                            key.clone(),
                            f.pids.clone(),
                            f.container.clone(),
                            start,
                            len_ms,
                        );
                        self.lines.insert(key.clone(), line);
                        changed.push(key.clone());
                    } else if self.refused.insert(key.clone()) {
                        tracing::warn!(
                            server = %key,
                            "{} servers are watched (their time lines fill the memory bound); this one is not",
                            self.lines.len()
                        );
                    }
                }
            }
        }
        self.name_pods();
        let now = self.watched();
        if now != was {
            let list = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
            tracing::info!(
                servers = list(&now),
                was = list(&was),
                "the server processes changed; watching the new set"
            );
            if let Err(e) = self.session.watch(now) {
                self.count(&e);
            }
        }
        for key in changed {
            self.find_metrics(&key);
        }
    }

    /// The processes of every live server, sorted.
    fn watched(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.lines.values().flat_map(|l| l.pids.clone()).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Whether a new server may have a time line: under the cap, or after the server gone
    /// longest was forgotten.
    fn make_room(&mut self) -> bool {
        if self.lines.len() < self.opts.max_servers.max(1) {
            return true;
        }
        let oldest = self
            .lines
            .iter()
            .filter_map(|(k, l)| Some((l.gone_at?, k.clone())))
            .min();
        match oldest {
            Some((_, key)) => {
                tracing::info!(server = %key, "forgetting the time line of a server gone longest");
                self.lines.remove(&key);
                true
            }
            None => false,
        }
    }

    /// Names the pods' containers again (the pod list may have learnt them since).
    fn name_pods(&mut self) {
        let Some(name) = self.opts.name_pods.as_mut() else {
            return;
        };
        for l in self.lines.values_mut() {
            let names = l.container.as_ref().and_then(&mut *name);
            if names.is_some() {
                l.name(names);
            }
        }
    }

    /// Sets where server `key` exports its metrics: the given URL when it is this server's
    /// (the only server, or the one listening on its port), else asks
    /// [`NodeOptions::find_metrics`]; the answer is taken at a later tick.
    fn find_metrics(&mut self, key: &ServerKey) {
        let single = self.lines.len() == 1;
        let Some(l) = self.lines.get_mut(key) else {
            return;
        };
        if l.pids.is_empty() && l.key != ServerKey::Target {
            return;
        }
        if let Some(url) = self.opts.session.metrics_url.clone()
            && (single || listens_on_port_of(&l.pids, &url))
        {
            if l.scraper.as_ref().map(|(u, _)| u) != Some(&url) {
                match self.session.scraper(&url) {
                    Ok(s) => l.scraper = Some((url, s)),
                    Err(e) => self
                        .session
                        .missing
                        .push(format!("server metrics off: {e}")),
                }
            }
            return;
        }
        let Some(find) = self.opts.find_metrics.as_mut() else {
            return;
        };
        let (tx, rx) = oneshot::channel();
        let fut = find(l.pids.clone());
        tokio::spawn(async move {
            let _ = tx.send(fut.await);
        });
        l.finding = Some(rx);
    }

    /// Scrapes the URLs [`Node::find_metrics`] found, once they are known.
    fn take_found_metrics(&mut self) {
        let mut errors = Vec::new();
        for l in self.lines.values_mut() {
            let Some(rx) = l.finding.as_mut() else {
                continue;
            };
            match rx.try_recv() {
                Err(oneshot::error::TryRecvError::Empty) => {}
                Err(oneshot::error::TryRecvError::Closed) | Ok(None) => l.finding = None,
                Ok(Some(url)) => {
                    l.finding = None;
                    if l.scraper.as_ref().map(|(u, _)| u) != Some(&url) {
                        tracing::info!(server = %l.key, "scraping {url}");
                        match self.session.scraper(&url) {
                            Ok(s) => l.scraper = Some((url, s)),
                            Err(e) => errors.push(e),
                        }
                    }
                }
            }
        }
        for e in &errors {
            self.count(e);
        }
    }

    /// Counts a failed step and logs it when its message changes (a server that is down
    /// fails every scrape; one line says so).
    fn count(&mut self, e: &StepError) {
        *self.step_errors.entry(e.step()).or_default() += 1;
        let msg = e.to_string();
        if self.last_step_error.as_ref() != Some(&msg) {
            tracing::warn!("window {}: {msg}; collection goes on", self.closed);
            if matches!(e, StepError::Kernel(_)) {
                self.session.missing.push(msg.clone());
            }
            self.last_step_error = Some(msg);
        }
    }

    fn close_tail(&mut self) {
        if self.last_tick.elapsed() * 2 >= Duration::from_millis(self.len_ms()) {
            self.tick();
        }
    }
}

/// Whether one of `pids` listens on the port of `url` (the `--port` a URL was made from).
fn listens_on_port_of(pids: &[u32], url: &str) -> bool {
    let Ok(uri) = url.parse::<hyper::Uri>() else {
        return false;
    };
    let port = uri
        .port_u16()
        .unwrap_or_else(|| crate::dial::default_port(&uri));
    pids.iter()
        .any(|&p| discover::listening_ports(p).contains(&port))
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
            server: None,
        }
    }

    #[tokio::test]
    async fn windows_close_in_order_with_verdicts_phases_and_a_bound() {
        let marks = Marks::default();
        let (mut n, _handle) = node(marks.clone(), 4);
        let origin = n.origin_unix_ms;
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
        let l = &n.lines[&ServerKey::Target];
        let starts: Vec<u64> = l.timeline.windows.iter().map(|w| w.start_unix_ms).collect();
        assert_eq!(
            starts,
            [200, 300, 400, 500].map(|d| origin + d),
            "kept the newest 4"
        );
        let phases: Vec<Option<&str>> = l
            .timeline
            .windows
            .iter()
            .map(|w| w.phase.as_deref())
            .collect();
        assert_eq!(phases, [Some("peak"); 4]);
        assert_eq!(l.verdicts.len(), 4);
        for (i, v) in l.verdicts.iter().enumerate() {
            assert_eq!(v.index, i);
            assert_eq!(v.start_unix_ms, starts[i]);
            // Empty windows: no latency rose, nothing named.
            assert_eq!(v.verdict.cause, Cause::None);
        }
        assert!(n.missing().iter().any(|m| m.contains("no server process")));
    }

    #[tokio::test]
    async fn readers_ask_the_running_node_and_get_its_time_line() {
        let (n, handle) = node(Marks::default(), 100);
        let stop = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn(n.run(stop.clone().cancelled_owned()));
        tokio::time::sleep(Duration::from_millis(350)).await;
        let latest = handle.latest().await.unwrap();
        let target = &latest.servers[0];
        assert_eq!(target.identity.server, "target");
        assert!(target.window.is_some() && target.verdict.is_some());
        let status = handle.status(true).await.unwrap();
        assert!(status.windows_closed >= 2, "{}", status.windows_closed);
        let timeline = status.servers[0].timeline.as_ref().unwrap();
        assert_eq!(timeline.windows.len() as u64, status.windows_closed);
        assert_eq!(handle.verdicts(2, None).await.unwrap().len(), 2);
        let e = handle
            .select(Selection::Phase("peak".into()), None)
            .await
            .unwrap()
            .unwrap_err();
        assert!(e.to_string().contains("POST /api/v1/marks"), "{e}");
        stop.cancel();
        let finished = task.await.unwrap();
        assert_eq!(finished.verdicts.len(), finished.timeline.windows.len());
        assert_eq!(handle.latest().await.unwrap_err(), NodeGone);
    }

    #[tokio::test]
    async fn each_server_has_its_own_time_line_marks_verdicts_and_a_bound() {
        use std::sync::{Arc, Mutex};
        let spawn = || {
            std::process::Command::new("sleep")
                .arg("30")
                .spawn()
                .unwrap()
        };
        let (mut first, mut second, mut third) = (spawn(), spawn(), spawn());
        let (pa, pb, pc) = (first.id(), second.id(), third.id());
        let found = Arc::new(Mutex::new(vec![pa, pb]));
        let marks = Marks::default();
        let mut opts = NodeOptions::new(SessionOptions {
            servers: Vec::new(),
            loadgen: None,
            cuda_targets: Vec::new(),
            kernel_without_servers: false,
            metrics_url: None,
            tls: crate::tls::TlsOptions::default(),
            window: Duration::from_millis(100),
        });
        opts.grouping = Grouping::PerServer;
        opts.max_servers = 2;
        opts.keep = 5;
        opts.rediscover_every = 1;
        opts.marks = Some(marks.clone());
        let shared = Arc::clone(&found);
        opts.discover = Some(Box::new(move || shared.lock().unwrap().clone()));
        let (mut n, _handle) = Node::start(opts);
        let (ka, kb, kc) = (
            ServerKey::Process(pa),
            ServerKey::Process(pb),
            ServerKey::Process(pc),
        );
        marks.push(mark("baseline", n.origin_unix_ms)).unwrap();
        marks
            .push(Mark {
                server: Some(ka.clone()),
                ..mark("peak", n.origin_unix_ms)
            })
            .unwrap();
        for _ in 0..3 {
            n.tick();
        }
        let keys: Vec<&ServerKey> = n.lines.keys().collect();
        assert_eq!(keys, [&ka, &kb]);
        for l in n.lines.values() {
            assert_eq!(l.timeline.windows.len(), 3);
            assert_eq!(l.verdicts.len(), 3);
        }
        let phase = |k: &ServerKey| n.lines[k].timeline.windows[0].phase.clone();
        assert_eq!(phase(&ka).as_deref(), Some("peak"));
        assert_eq!(phase(&kb).as_deref(), Some("baseline"));
        // Each phase is on one server: found without naming it; a server named that has none
        // says which servers there are.
        let sel = n.select(&Selection::Phase("peak".into()), None).unwrap();
        assert_eq!(sel.server.server, ka.to_string());
        let sel = n
            .select(&Selection::Phase("baseline".into()), None)
            .unwrap();
        assert_eq!(sel.server.server, kb.to_string());
        let e = n
            .select(&Selection::Phase("peak".into()), Some(&kc))
            .unwrap_err();
        assert!(e.to_string().contains(&ka.to_string()), "{e}");

        // A third server past the cap is not watched while both others live.
        found.lock().unwrap().push(pc);
        n.tick();
        assert!(!n.lines.contains_key(&kc));
        // Once A is gone, C takes its place; B's time line goes on, bounded by `keep`.
        first.kill().unwrap();
        first.wait().unwrap();
        *found.lock().unwrap() = vec![pb, pc];
        for _ in 0..6 {
            n.tick();
        }
        let keys: Vec<&ServerKey> = n.lines.keys().collect();
        assert_eq!(keys, [&kb, &kc]);
        assert_eq!(n.lines[&kb].timeline.windows.len(), 5);
        assert!(
            n.lines
                .values()
                .all(|l| l.verdicts.len() == l.timeline.windows.len())
        );
        let mut v = Vec::new();
        n.answer(query::Query::Verdicts(10, Some(kc.clone()), {
            let (tx, rx) = oneshot::channel();
            v.push(rx);
            tx
        }));
        let listed = v.pop().unwrap().await.unwrap();
        assert_eq!(listed.len(), 5);
        assert!(listed.iter().all(|(s, _, _)| s.server == kc.to_string()));
        for p in [&mut second, &mut third] {
            p.kill().unwrap();
            p.wait().unwrap();
        }
    }
}

//! The one collection pipeline: [`Node`] starts the collectors, splits what they see by server
//! (a pod, a container, a listening process: [`Grouping`]), closes a window of every server's
//! own time line every window length, labels it with the phase an external generator marked,
//! attributes it as it closes against that server's own baseline, and owns the time lines.
//! Readers (the HTTP routes, a finished `stress --explain` run) ask it over a channel through
//! a [`NodeHandle`]; nothing else holds a time line.
//!
//! Memory: a server's time line keeps [`NodeOptions::keep`] windows and their verdicts, all
//! servers together [`NodeOptions::max_windows`] (each its share), and at most
//! [`NodeOptions::max_servers`] servers are kept, live or gone (the daemon: 3600 windows per
//! server, 14,400 in all, about 72 MiB; 16 servers).
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

mod hops;
mod line;
pub mod marks;
mod query;
mod servers;

use std::{
    collections::{BTreeMap, BTreeSet},
    future::Future,
    pin::Pin,
    time::{Duration, Instant},
};

use tokio::sync::mpsc;

pub use query::{
    Latest, NodeGone, NodeHandle, NodeStatus, SelectError, Selected, Selection, ServerLatest,
    ServerStatus,
};

use crate::{
    attribute::WindowVerdict,
    collect::{
        cgroup::Container,
        identity::{K8sIdentity, ServerIdentity, ServerKey},
        session::{ServerSide, Session, SessionOptions, StepError},
        timeline::{Part, Timeline, Window},
    },
};

use line::Line;
use marks::Marks;

/// How long the node waits, once the load has stopped, for the kernel events still on their
/// way from the ring buffers.
const FINAL_EVENTS: std::time::Duration = std::time::Duration::from_millis(100);

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
    /// [`Place::key`](crate::collect::identity::Place::key)).
    PerServer,
}

/// Servers kept at most by default (with their time lines); see [`NodeOptions::max_servers`].
pub const MAX_SERVERS: usize = 16;

/// Windows kept by default over all servers together; see [`NodeOptions::max_windows`]. A
/// window with its verdict takes about 5 KiB (measured: 3600 daemon windows with their
/// verdicts, 18 MiB of RSS), so about 72 MiB at most.
pub const MAX_WINDOWS: usize = 4 * 3600;

/// How the node runs.
pub struct NodeOptions {
    /// What to collect.
    pub session: SessionOptions,
    /// How the processes are split into servers.
    pub grouping: Grouping,
    /// Windows kept per server; older ones are dropped.
    pub keep: usize,
    /// Windows kept over all servers together: with `n` servers each keeps at most
    /// `max_windows / n` (and `keep`).
    pub max_windows: usize,
    /// Servers kept at most, live or gone: a new server past it replaces the one gone longest,
    /// or is not watched (and logged) while all are live.
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
    /// With [`Grouping::Target`]: the hops behind the target, each a server of its own
    /// (`stress --explain --service`); their processes are not the target's.
    pub services: Vec<Service>,
}

/// One hop of the pipeline behind the target: its name, processes and metrics endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    /// The name given (`--service NAME=PORT`).
    pub name: String,
    /// Its processes.
    pub pids: Vec<u32>,
    /// Where its metrics are scraped, when it has any.
    pub metrics_url: Option<String>,
}

impl Service {
    /// `pids` less the processes of `services`, sorted and without repeats: what is left is the
    /// target's (a `--service` hop is watched as its own server).
    #[must_use]
    pub fn outside(services: &[Service], pids: impl IntoIterator<Item = u32>) -> Vec<u32> {
        let mut left: Vec<u32> = pids
            .into_iter()
            .filter(|p| !services.iter().any(|s| s.pids.contains(p)))
            .collect();
        left.sort_unstable();
        left.dedup();
        left
    }
}

impl NodeOptions {
    /// Defaults: one target, keep 3600 windows, [`MAX_WINDOWS`] in all, [`MAX_SERVERS`], no
    /// marks, no discovery, keep joins.
    #[must_use]
    pub fn new(session: SessionOptions) -> Self {
        Self {
            session,
            grouping: Grouping::Target,
            keep: 3600,
            max_windows: MAX_WINDOWS,
            max_servers: MAX_SERVERS,
            marks: None,
            discover: None,
            rediscover_every: 10,
            keep_joins: true,
            observers: Vec::new(),
            find_metrics: None,
            name_pods: None,
            services: Vec::new(),
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
    /// The time line of each of [`NodeOptions::services`].
    pub services: Vec<ServiceLine>,
}

/// A hop's time line when the node stopped (`stress --explain --service`).
pub struct ServiceLine {
    /// Its name (`--service NAME=PORT`).
    pub name: String,
    /// Its processes.
    pub pids: Vec<u32>,
    /// Its windows.
    pub timeline: Timeline,
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
        // The ring-buffer readers deliver what the kernel reported as the load stopped (each
        // pooled connection's last exchange is reported when it closes) before the last drain.
        tokio::time::sleep(FINAL_EVENTS).await;
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
        let mut services = Vec::new();
        let mut target = None;
        for (key, l) in self.lines {
            match key {
                ServerKey::Service(name) => services.push(ServiceLine {
                    name,
                    pids: l.pids,
                    timeline: l.timeline,
                }),
                _ if target.is_none() => target = Some((l.timeline, l.verdicts.into())),
                _ => {}
            }
        }
        let (timeline, verdicts) =
            target.unwrap_or_else(|| (Timeline::new(self.origin_unix_ms, 1), Vec::new()));
        Finished {
            timeline,
            verdicts,
            server_side,
            missing: self.session.missing,
            servers,
            services,
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
        let keep = self.keep();
        let mut closed = Vec::new();
        for l in self.lines.values_mut() {
            if l.gone_at.is_some() {
                l.trim(keep);
                continue;
            }
            if let Some((index, v)) = l.close(at, keep) {
                closed.push((l.key.clone(), index, v));
            }
        }
        // Every server's window is closed: a gateway's can be split among those it called.
        for (key, index, mut v) in closed {
            let l = &self.lines[&key];
            v.hops = hops::of_window(&self.lines, l, at, v.verdict.cause);
            v.orchestration = hops::orchestration(&self.lines, l, at);
            for o in &mut self.opts.observers {
                o(&l.identity, &l.timeline.windows[index], &v);
            }
            if let Some(last) = self.lines.get_mut(&key).and_then(|l| l.verdicts.back_mut()) {
                last.hops = v.hops;
                last.orchestration = v.orchestration;
            }
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

    /// Windows each server keeps now: [`NodeOptions::keep`], within its share of
    /// [`NodeOptions::max_windows`].
    fn keep(&self) -> usize {
        let share = self.opts.max_windows / self.lines.len().max(1);
        self.opts.keep.min(share).max(1)
    }

    fn close_tail(&mut self) {
        if self.last_tick.elapsed() * 2 >= Duration::from_millis(self.len_ms()) {
            self.tick();
        }
    }
}

#[cfg(test)]
mod tests;

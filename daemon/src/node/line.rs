//! One server's time line on the node: its windows, their verdicts, its counter totals and the
//! scraper of its own `/metrics`. The node closes every live line's window at each tick.

use std::collections::VecDeque;

use tokio::sync::oneshot;

use super::marks::Marks;
use crate::{
    attribute::{WindowVerdict, rolling},
    collect::{
        catalog::Totals,
        cgroup::Container,
        identity::{K8sIdentity, ServerIdentity, ServerKey},
        procfs,
        server::ServerCollector,
        timeline::Timeline,
    },
};

/// Windows whose phase is taken from the marks again at every tick, so a mark posted up to this
/// many windows late (with its own `at`) still labels them.
const RELABEL_WINDOWS: usize = 60;

/// One server's time line and collectors of its own.
pub(super) struct Line {
    /// What it is keyed by.
    pub key: ServerKey,
    /// How it is exported.
    pub identity: ServerIdentity,
    /// Its processes now (empty once gone).
    pub pids: Vec<u32>,
    /// Its container, when it runs in one.
    pub container: Option<Container>,
    pub timeline: Timeline,
    /// The verdict of each kept window, as it closed.
    pub verdicts: VecDeque<WindowVerdict>,
    pub totals: Totals,
    /// Its `/metrics` scraper and the URL scraped.
    pub scraper: Option<(String, ServerCollector)>,
    /// Where its metrics are, once the lookup answers.
    pub finding: Option<oneshot::Receiver<Option<String>>>,
    /// The node's window count when its processes were found gone; `None` while they live.
    pub gone_at: Option<u64>,
    /// Why its metrics are missing now, if they are.
    pub scrape_error: Option<String>,
}

impl Line {
    /// A new line for `key`'s processes `pids`, its windows starting at `origin_unix_ms`.
    pub fn new(
        key: ServerKey,
        pids: Vec<u32>,
        container: Option<Container>,
        origin_unix_ms: u64,
        len_ms: u64,
    ) -> Self {
        let identity = ServerIdentity {
            server: key.to_string(),
            process: pids.first().map(|&p| procfs::comm(p)),
            k8s: None,
        };
        let mut line = Self {
            key,
            identity,
            pids,
            container,
            timeline: Timeline::new(origin_unix_ms, len_ms),
            verdicts: VecDeque::new(),
            totals: Totals::default(),
            scraper: None,
            finding: None,
            gone_at: None,
            scrape_error: None,
        };
        line.name(None);
        line
    }

    /// Sets its Kubernetes names: `names` when the pod list had them, else the UIDs of its
    /// cgroup path.
    pub fn name(&mut self, names: Option<K8sIdentity>) {
        self.identity.k8s = names.or_else(|| {
            let c = self.container.as_ref()?;
            Some(K8sIdentity {
                pod_uid: c.pod_uid.clone()?,
                container_id: c.id.clone(),
                ..K8sIdentity::default()
            })
        });
    }

    /// Creates the window holding `at` (with any skipped before it), and labels the recent
    /// windows with the phase in force for this server at their start again (a mark may
    /// arrive late, with an explicit `at`).
    pub fn open(&mut self, at: u64, marks: Option<&Marks>) {
        let t = &mut self.timeline;
        t.at(at);
        if let Some(m) = marks {
            let n = t.windows.len();
            for w in &mut t.windows[n.saturating_sub(RELABEL_WINDOWS)..] {
                w.phase = m.phase_at(w.start_unix_ms, &self.key);
            }
        }
    }

    /// Fills the server part of the window at `at` from its scraper; the scrape error, if
    /// the latest scrape failed.
    pub fn scrape_into(&mut self, at: u64) -> Option<String> {
        let (_, s) = self.scraper.as_mut()?;
        s.close_window(self.timeline.at(at));
        self.scrape_error.clone_from(&s.last_error);
        s.last_error.clone()
    }

    /// Attributes the window at `at` (filled), keeps its verdict and the newest `keep`
    /// windows; returns the window's index and verdict.
    pub fn close(&mut self, at: u64, keep: usize) -> Option<(usize, WindowVerdict)> {
        self.totals.add(self.timeline.at(at));
        let index = self.timeline.index(at);
        let v = rolling::verdict_at(&self.timeline, index)?;
        // Windows `at` created for a skipped tick get no verdict; the list follows the windows.
        while self.verdicts.len() + 1 < self.timeline.windows.len() {
            let i = self.verdicts.len();
            let skipped = rolling::verdict_at(&self.timeline, i);
            self.verdicts.extend(skipped);
        }
        self.verdicts.push_back(v.clone());
        let dropped = self.trim(keep);
        Some((index - dropped, v))
    }

    /// Keeps the newest `keep` windows (at least one) and their verdicts; returns how many
    /// windows were dropped.
    pub fn trim(&mut self, keep: usize) -> usize {
        let before = self.timeline.windows.len();
        self.timeline.retain_last(keep.max(1));
        while self.verdicts.len() > self.timeline.windows.len() {
            self.verdicts.pop_front();
        }
        // Verdict indices follow the kept windows.
        for (i, v) in self.verdicts.iter_mut().enumerate() {
            v.index = i;
        }
        before - self.timeline.windows.len()
    }
}

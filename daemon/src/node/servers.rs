//! Which servers the node keeps time lines for: the processes found split into servers
//! ([`Grouping`]), within [`NodeOptions::max_servers`], with their names and their metrics
//! endpoints.

use std::collections::BTreeMap;

use tokio::sync::oneshot;

use super::{Grouping, Node, line::Line};
use crate::collect::{
    discover,
    identity::{self, ServerKey, Servers},
};

impl Node {
    /// Splits `pids` into servers and updates the time lines: new servers get one (within
    /// [`NodeOptions::max_servers`]), servers whose processes changed are watched anew,
    /// servers not found any more are marked gone (their time lines stay, for reports).
    pub(super) fn regroup(&mut self, pids: &[u32]) {
        let found: Servers = match self.opts.grouping {
            Grouping::Target => {
                let services = &self.opts.services;
                let pids = super::Service::outside(services, pids.iter().copied());
                let found = |pids: Vec<u32>| identity::Found {
                    pids,
                    container: None,
                };
                let mut servers = BTreeMap::from([(ServerKey::Target, found(pids))]);
                for s in services {
                    servers.insert(ServerKey::Service(s.name.clone()), found(s.pids.clone()));
                }
                servers
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
    pub(super) fn watched(&self) -> Vec<u32> {
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

    /// Sets where server `key` exports its metrics: a service's own endpoint
    /// ([`NodeOptions::services`]), the given URL when it is this server's (the only server, or
    /// the one listening on its port), else asks [`NodeOptions::find_metrics`]; the answer is
    /// taken at a later tick.
    fn find_metrics(&mut self, key: &ServerKey) {
        let single = self.lines.len() == 1;
        let Some(l) = self.lines.get_mut(key) else {
            return;
        };
        if l.pids.is_empty() && l.key != ServerKey::Target {
            return;
        }
        // A service's own endpoint, or the given one when it is this server's.
        let given = if let ServerKey::Service(name) = &l.key {
            let own = self.opts.services.iter().find(|s| &s.name == name);
            let Some(url) = own.and_then(|s| s.metrics_url.clone()) else {
                return;
            };
            Some(url)
        } else {
            (self.opts.session.metrics_url.clone())
                .filter(|url| single || listens_on_port_of(&l.pids, url))
        };
        if let Some(url) = given {
            if l.scraper.as_ref().map(|(u, _)| u) != Some(&url) {
                match self.session.scraper(&url) {
                    Ok(s) => l.scraper = Some((url, s)),
                    Err(e) => self.session.missing.push(match &l.key {
                        ServerKey::Target => format!("server metrics off: {e}"),
                        k => format!("metrics of {k} off: {e}"),
                    }),
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
    pub(super) fn take_found_metrics(&mut self) {
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

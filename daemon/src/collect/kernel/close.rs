//! Closing a window: each part's run-queue delay, network and GPU signals since the previous
//! one.

use std::collections::{BTreeMap, HashMap};

use probe_common::cuda::EntryCounts;
use probe_common::sockets::ROLE_CLIENT;

use super::KernelCollector;
use super::path::{ConnCounts, Path};
use super::pending::{Pending, fill_net};
use crate::collect::cuda::GpuMemStats;
use crate::collect::procfs;
use crate::collect::runq::RunqHist;
use crate::collect::timeline::{NetSignals, Part, RunqSignals};
use crate::probes::{ProbeError, sockets::endpoints};
use crate::quantile::Quantile;

impl KernelCollector {
    /// Fills each part's window with the kernel signals of its processes since the previous
    /// call, and resets. The load generator's connections go to the server when there is one
    /// part; an accept counts for the server that took its socket ([`Accepts`]); XIDs (a GPU
    /// fault, node-wide) go to every part.
    ///
    /// [`Accepts`]: crate::collect::accepts::Accepts
    pub fn close_windows(&mut self, parts: &mut [Part<'_>]) -> Result<(), ProbeError> {
        self.drain();
        self.settle_accepts();
        let mut pending = std::mem::take(&mut self.pending);
        let shared = std::mem::take(&mut self.shared);
        let runq = self.runq_window(parts)?;
        let net = self.rtt_window(parts)?;
        let counts = self.counts_window(parts)?;
        let one = parts.len() == 1;
        for (((part, runq), mut net), counts) in parts.iter_mut().zip(runq).zip(net).zip(counts) {
            let mut p = Pending::default();
            for pid in part.pids {
                if let Some(q) = pending.remove(pid) {
                    p.merge(&q);
                }
            }
            if one {
                p.merge(&shared);
            } else {
                p.gpu.xids += shared.gpu.xids;
                p.gpu.xid_events.extend(&shared.gpu.xid_events);
            }
            let mut gpu = std::mem::take(&mut p.gpu);
            fill_net(&mut net, p);
            let held = |f: fn(&GpuMemStats) -> u64| -> u64 {
                part.pids
                    .iter()
                    .filter_map(|t| self.account.get(*t))
                    .map(f)
                    .sum()
            };
            gpu.live_bytes = held(|s| s.live_bytes);
            gpu.mapped_bytes = held(|s| s.mapped_bytes);
            gpu.launches = counts.kernels + counts.graphs;
            gpu.h2d_bytes = counts.h2d_bytes;
            gpu.d2h_bytes = counts.d2h_bytes;
            let w = &mut *part.window;
            w.runq = Some(runq);
            w.net = Some(net);
            w.gpu = Some(gpu);
        }
        Ok(())
    }

    /// Launches and async-copy bytes of each part's processes since the previous call.
    fn counts_window(&mut self, parts: &[Part<'_>]) -> Result<Vec<EntryCounts>, ProbeError> {
        let now: HashMap<u32, EntryCounts> = self
            .probes
            .cuda_counts()?
            .into_iter()
            .filter(|(t, _)| self.is_server(*t))
            .collect();
        let out = parts
            .iter()
            .map(|part| {
                part.pids
                    .iter()
                    .filter_map(|t| {
                        let n = now.get(t)?;
                        let before = self.last_counts.get(t).copied().unwrap_or_default();
                        Some(n.zip(&before, u64::saturating_sub))
                    })
                    .fold(EntryCounts::default(), |a, d| {
                        a.zip(&d, u64::saturating_add)
                    })
            })
            .collect();
        self.last_counts = now;
        Ok(out)
    }

    /// Each part's run-queue delay and on-CPU time since the previous call; the load
    /// generator's own delay goes with every part.
    fn runq_window(&mut self, parts: &[Part<'_>]) -> Result<Vec<RunqSignals>, ProbeError> {
        let now: BTreeMap<u32, RunqHist> = self
            .probes
            .runq_snapshot()?
            .into_iter()
            .map(|(t, h)| (t, RunqHist(h)))
            .collect();
        let delta = |t: u32| -> RunqHist {
            now.get(&t)
                .map(|h| h.since(&self.last_runq.get(&t).copied().unwrap_or_default()))
                .unwrap_or_default()
        };
        let lg = self.opts.loadgen.map(delta);
        let cpu_now: HashMap<u32, f64> = self
            .opts
            .servers
            .iter()
            .filter_map(|&p| Some((p, procfs::cpu_ms(p)?)))
            .collect();
        let threads_now: HashMap<u32, (u32, f64)> = self
            .opts
            .servers
            .iter()
            .flat_map(|&p| {
                procfs::thread_cpu_ms(p)
                    .into_iter()
                    .map(move |(tid, ms)| (tid, (p, ms)))
            })
            .collect();
        let out = parts
            .iter()
            .map(|part| {
                let mut server = RunqHist::default();
                for &t in part.pids {
                    server.merge(&delta(t));
                }
                // A process first seen in this window has no "before": it adds nothing yet.
                let mut oncpu_ms = 0.0;
                let mut oncpu_known = false;
                for p in part.pids {
                    if let (Some(now), Some(before)) = (cpu_now.get(p), self.last_cpu.get(p)) {
                        oncpu_ms += now - before;
                        oncpu_known = true;
                    }
                }
                // A thread first seen in this window has no "before" either.
                let busiest_thread_ms = threads_now
                    .iter()
                    .filter(|(_, (p, _))| part.pids.contains(p))
                    .filter_map(|(tid, (_, now))| Some(now - self.last_thread_cpu.get(tid)?))
                    .reduce(f64::max)
                    .map(|ms| ms.max(0.0));
                RunqSignals {
                    samples: server.count(),
                    p50_us: server.quantile(0.5).unwrap_or(0.0),
                    p99_us: server.quantile(0.99).unwrap_or(0.0),
                    mean_us: server.mean_us(),
                    total_ms: server.0.sum_us as f64 / 1000.0,
                    own_ms: Some(server.0.self_us as f64 / 1000.0),
                    loadgen_p99_us: lg.and_then(|h| h.quantile(0.99)),
                    loadgen_total_ms: lg.map(|h| h.0.sum_us as f64 / 1000.0),
                    oncpu_ms: oncpu_known.then_some(oncpu_ms.max(0.0)),
                    busiest_thread_ms,
                }
            })
            .collect();
        self.last_cpu = cpu_now;
        self.last_thread_cpu = threads_now
            .into_iter()
            .map(|(t, (_, ms))| (t, ms))
            .collect();
        self.last_runq = now;
        Ok(out)
    }

    /// Each part's RTT and retransmits on its processes' connections since the previous call
    /// (live ones from the connection table, closed ones from their close); the load
    /// generator's connections add their retransmits (a lost request is retransmitted by the
    /// client) to every part, not their RTT.
    fn rtt_window(&mut self, parts: &[Part<'_>]) -> Result<Vec<NetSignals>, ProbeError> {
        let owner: HashMap<u32, usize> = parts
            .iter()
            .enumerate()
            .flat_map(|(i, p)| p.pids.iter().map(move |t| (*t, i)))
            .collect();
        let mut acc = vec![Path::default(); parts.len()];
        let mut loadgen = Path::default();
        let mut live = HashMap::new();
        let mut closed = std::mem::take(&mut self.closed);
        self.callers.clear();
        for (sk, c) in self.probes.sock_conns()? {
            if !(self.is_server(c.tgid) || Some(c.tgid) == self.opts.loadgen) {
                continue;
            }
            if c.role == ROLE_CLIENT
                && self.is_server(c.tgid)
                && let Some((local, _)) = endpoints(&c.tuple)
            {
                self.callers.insert(local, c.tgid);
            }
            let last = self.last_conn.get(&sk).copied().unwrap_or_default();
            closed.entry(c.tgid).or_default().add(&c, last);
            live.insert(sk, ConnCounts::of(&c));
        }
        for (tgid, path) in closed {
            if Some(tgid) == self.opts.loadgen && tgid != 0 {
                loadgen.retrans += path.retrans;
            } else if let Some(&i) = owner.get(&tgid).filter(|_| self.is_server(tgid)) {
                acc[i].merge(&path);
            }
        }
        self.last_conn = live;
        Ok(acc
            .into_iter()
            .map(|p| NetSignals {
                srtt_mean_us: (p.samples > 0).then(|| p.srtt_sum_us as f64 / p.samples as f64),
                srtt_max_us: (p.samples > 0).then_some(f64::from(p.srtt_max_us)),
                retrans: p.retrans + loadgen.retrans,
                ..NetSignals::default()
            })
            .collect())
    }
}

//! Kernel signals of the watched processes, folded into time-line windows: run-queue delay,
//! TCP (connect latency, smoothed RTT, retransmits, server-side request timing) and CUDA
//! driver calls. Owns the loaded probes and the readers of their ring buffers.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    os::unix::fs::MetadataExt as _,
    path::PathBuf,
};

use probe_common::{
    cuda::{AllocOutcome, CudaCall, CudaEvent, EntryCounts},
    sockets::{Conn, PHASE_RESPONDING, ROLE_CLIENT, SockEvent, SockEventKind},
};
use serde::Serialize;
use tokio::sync::mpsc::Receiver;

use super::{
    accepts::Accepts,
    cuda::{GpuMemAccount, GpuMemStats},
    runq::RunqHist,
    stats::quantile,
    timeline::{GpuSignals, NetSignals, Part, RunqSignals, XidEvent, XidSource},
};
use crate::probes::{
    Family, HookLoss, HookStatus, ProbeError, Probes,
    cuda::discover_libcuda,
    reader::{ChannelDrops, Reader},
    sockets::endpoints,
};

/// What to watch.
#[derive(Debug, Clone, Default)]
pub struct KernelOptions {
    /// The inference server's processes.
    pub servers: Vec<u32>,
    /// The load generator's own process, watched so its own CPU starvation is visible.
    pub loadgen: Option<u32>,
    /// Libraries or binaries exporting the CUDA driver API to hook (besides discovered ones).
    pub cuda_targets: Vec<PathBuf>,
    /// Also hook every `libcuda.so*` mapped by a running process.
    pub discover_libcuda: bool,
}

/// One server-side request/response exchange, kept for joins with client-side records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Exchange {
    /// Server process.
    pub tgid: u32,
    /// The client's address as the server sees it (its remote endpoint).
    pub client: Option<std::net::SocketAddr>,
    /// First request byte read (kernel monotonic ns).
    pub req_in_ns: u64,
    /// First response write.
    pub first_out_ns: u64,
    /// Second response write (first token of a streamed response); 0 if none.
    pub second_out_ns: u64,
    /// Last response write.
    pub last_out_ns: u64,
    /// Segments the server's side of the connection retransmitted during the exchange.
    pub retrans: u32,
}

impl Exchange {
    /// The exchange of `conn`, a connection of server process `tgid`.
    fn of(tgid: u32, conn: &Conn) -> Self {
        let ex = conn.exchange;
        Self {
            tgid,
            client: endpoints(&conn.tuple).map(|(_, remote)| remote),
            req_in_ns: ex.req_in_ns,
            first_out_ns: ex.first_out_ns,
            second_out_ns: ex.second_out_ns,
            last_out_ns: ex.last_out_ns,
            retrans: conn.retrans.saturating_sub(ex.retrans_start),
        }
    }

    /// Request in -> first token, ns: the second write (the first after a streamed response's
    /// headers), or the first when the response came in one write.
    #[must_use]
    pub fn first_token_ns(&self) -> u64 {
        let out = if self.second_out_ns == 0 {
            self.first_out_ns
        } else {
            self.second_out_ns
        };
        out.saturating_sub(self.req_in_ns)
    }
}

/// A segment retransmitted on a connection between the load generator and a watched server,
/// by either side: named by the client's address of the connection, to join with the request
/// it delayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Retransmit {
    /// When (kernel monotonic ns).
    pub ts_ns: u64,
    /// The client's address: the server connection's remote end, or the load generator
    /// connection's local end.
    pub client: std::net::SocketAddr,
}

/// What could not be recorded, kernel and userspace, exported as `inferscope_dropped_total`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Losses {
    /// Kernel: run-queue samples not recorded (all its hooks).
    pub runq: u64,
    /// Kernel: socket events or connections not recorded (all its hooks).
    pub sockets: u64,
    /// Kernel: CUDA events or calls not recorded (all its hooks).
    pub cuda: u64,
    /// Kernel: the same losses per hook and kind, as exported.
    pub hooks: Vec<HookLoss>,
    /// Userspace: events dropped because a channel was full.
    pub channels: u64,
    /// NVML samples dropped because the sampler's channel was full.
    pub nvml: u64,
    /// Scrapes of the servers' `/metrics` dropped because the scraper's channel was full.
    pub scrape: u64,
}

/// One drop counter as exported: where it arose (`stage`, `what`) and, for the kernel's,
/// which hook lost what.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LossCount {
    /// `kernel`, `channel`, `nvml` or `scrape`.
    pub stage: &'static str,
    /// The family (`runqlat`, `sockets`, `cuda`) or what was dropped (`events`, `samples`,
    /// `scrapes`).
    pub what: &'static str,
    /// The kernel hook that lost it.
    pub hook: Option<&'static str>,
    /// Why the kernel lost it (`ringbuf_full`, `conns_full`, ...).
    pub reason: Option<&'static str>,
    /// How many, since start.
    pub count: u64,
}

impl Losses {
    /// Each count with where it arose, the kernel's per hook, as the drop counters name them.
    #[must_use]
    pub fn labelled(&self) -> Vec<LossCount> {
        let plain = |stage, what, count| LossCount {
            stage,
            what,
            hook: None,
            reason: None,
            count,
        };
        let mut out: Vec<LossCount> = self
            .hooks
            .iter()
            .map(|h| LossCount {
                stage: "kernel",
                what: h.family,
                hook: Some(h.hook),
                reason: Some(h.reason),
                count: h.count,
            })
            .collect();
        out.extend([
            plain("channel", "events", self.channels),
            plain("nvml", "samples", self.nvml),
            plain("scrape", "scrapes", self.scrape),
        ]);
        out
    }
}

/// Per-window accumulators of one process (or of the events no server owns), reset when a
/// window is closed.
#[derive(Default)]
struct Pending {
    connect_ms: Vec<f64>,
    connects: u64,
    ttfb_ms: Vec<f64>,
    first_token_ms: Vec<f64>,
    exchange_ms: Vec<f64>,
    retrans_exchanges: u64,
    /// Lifetimes of the server's connections that closed, ms.
    lifetime_ms: Vec<f64>,
    /// First tokens of the exchanges another watched server asked for, ms.
    called_first_token_ms: Vec<f64>,
    gpu: GpuSignals,
}

impl Pending {
    /// One connection set up (connected or accepted) in `ms`.
    fn connected(&mut self, ms: f64) {
        self.connects += 1;
        self.connect_ms.push(ms);
    }

    /// Adds `o`'s events to these (several processes of one server).
    fn merge(&mut self, o: &Pending) {
        self.connect_ms.extend(&o.connect_ms);
        self.connects += o.connects;
        self.ttfb_ms.extend(&o.ttfb_ms);
        self.first_token_ms.extend(&o.first_token_ms);
        self.exchange_ms.extend(&o.exchange_ms);
        self.retrans_exchanges += o.retrans_exchanges;
        self.lifetime_ms.extend(&o.lifetime_ms);
        self.called_first_token_ms.extend(&o.called_first_token_ms);
        let (g, h) = (&mut self.gpu, &o.gpu);
        g.allocs += h.allocs;
        g.oom += h.oom;
        g.frees += h.frees;
        g.sync_ms += h.sync_ms;
        g.xids += h.xids;
        g.xid_events.extend(&h.xid_events);
    }
}

/// The kernel side of the time line.
pub struct KernelCollector {
    probes: Probes,
    opts: KernelOptions,
    /// (device, inode) of every CUDA target hooked, so each file is hooked once.
    cuda_attached: HashSet<(u64, u64)>,
    sock: Option<Reader<SockEvent>>,
    cuda: Option<Reader<CudaEvent>>,
    last_runq: BTreeMap<u32, RunqHist>,
    /// Each live connection's counts at the previous window's close.
    last_conn: HashMap<u64, ConnCounts>,
    /// What connections that closed since the previous window added after it, by owner: a
    /// short connection (one stream, as llama-server keeps them) lives and dies between two
    /// reads of the connection table.
    closed: HashMap<u32, Path>,
    /// On-CPU ms of each server process at the previous window's close.
    last_cpu: HashMap<u32, f64>,
    /// On-CPU ms of each server thread at the previous window's close, by thread id.
    last_thread_cpu: HashMap<u32, f64>,
    /// Launch and async-copy counts of each server process at the previous window's close.
    last_counts: HashMap<u32, EntryCounts>,
    account: GpuMemAccount,
    /// Each server process's events since the previous window.
    pending: HashMap<u32, Pending>,
    /// Events no one server owns: the load generator's connections (joined to the server only
    /// when there is one), GPU XIDs (joined to every server).
    shared: Pending,
    /// Accepts waiting for the process that takes their socket.
    accepts: Accepts,
    exchanges: Vec<Exchange>,
    retransmits: Vec<Retransmit>,
    /// Exchanges and retransmits dropped, oldest first, once [`MAX_EXCHANGES`] were kept.
    joins_dropped: u64,
    /// The local addresses of the watched servers' own calls out (a gateway's connections to
    /// its services), with the caller: an exchange a server answers on one of them is a hop
    /// of a chain. Rebuilt from the connection table every window, with the connects since.
    callers: HashMap<std::net::SocketAddr, u32>,
}

/// Most exchanges (and retransmits) kept for joins; older ones are dropped first.
const MAX_EXCHANGES: usize = 200_000;

impl KernelCollector {
    /// Loads and attaches every probe family. Run-queue hooks are required; socket and CUDA
    /// hooks attach one by one and failures are reported in [`KernelCollector::hooks`].
    /// Needs a tokio runtime (ring-buffer readers).
    pub fn start(opts: KernelOptions) -> Result<Self, ProbeError> {
        let mut probes = Probes::load()?;
        probes.attach(Family::Runqlat)?;
        probes.attach(Family::Sockets)?;
        probes.attach(Family::Cuda)?;
        let sock = probes.sock_events(16_384)?;
        let cuda = probes.cuda_events(16_384)?;
        let mut me = Self {
            probes,
            opts: KernelOptions::default(),
            cuda_attached: HashSet::new(),
            sock,
            cuda,
            last_runq: BTreeMap::new(),
            last_conn: HashMap::new(),
            closed: HashMap::new(),
            callers: HashMap::new(),
            last_cpu: HashMap::new(),
            last_thread_cpu: HashMap::new(),
            last_counts: HashMap::new(),
            account: GpuMemAccount::default(),
            pending: HashMap::new(),
            shared: Pending::default(),
            accepts: Accepts::default(),
            exchanges: Vec::new(),
            retransmits: Vec::new(),
            joins_dropped: 0,
        };
        me.watch(opts)?;
        Ok(me)
    }

    /// Changes what is watched: the watch-list of every probe, and CUDA uprobes on targets not
    /// hooked yet (given ones, discovered `libcuda.so*`, and watched binaries that export the
    /// driver API themselves, such as the simulated device).
    pub fn watch(&mut self, opts: KernelOptions) -> Result<(), ProbeError> {
        let mut watch = opts.servers.clone();
        watch.extend(opts.loadgen);
        self.probes.set_watch(&watch)?;
        let mut targets: Vec<PathBuf> = opts.cuda_targets.clone();
        if opts.discover_libcuda {
            targets.extend(discover_libcuda());
        }
        // `/proc/<pid>/exe` opens the binary even when it lives in another mount namespace.
        targets.extend(
            opts.servers
                .iter()
                .map(|p| PathBuf::from(format!("/proc/{p}/exe")))
                .filter(|exe| crate::probes::cuda::exports(exe, "cuMemAlloc_v2")),
        );
        for t in targets {
            let Ok(md) = std::fs::metadata(&t) else {
                continue;
            };
            if self.cuda_attached.insert((md.dev(), md.ino())) {
                self.probes.attach_cuda_target(&t);
            }
        }
        self.opts = opts;
        Ok(())
    }

    /// The processes watched now.
    #[must_use]
    pub fn options(&self) -> &KernelOptions {
        &self.opts
    }

    /// Every hook and whether it is attached.
    #[must_use]
    pub fn hooks(&self) -> &[HookStatus] {
        self.probes.hooks()
    }

    /// Server-side exchanges seen so far (bounded), for joins with the load generator's records.
    #[must_use]
    pub fn exchanges(&self) -> &[Exchange] {
        &self.exchanges
    }

    /// What the joins with the load's requests miss: the exchanges and retransmits dropped
    /// (the oldest first) past [`MAX_EXCHANGES`], in one line; `None` when none were.
    #[must_use]
    pub fn joins_cut(&self) -> Option<String> {
        (self.joins_dropped > 0).then(|| {
            format!(
                "kernel joins miss the run's earliest requests: {} of the oldest server exchanges and retransmits were dropped ({MAX_EXCHANGES} of each are kept)",
                self.joins_dropped
            )
        })
    }

    /// [`KernelCollector::exchanges`] and the exchanges still open: the kernel reports an
    /// exchange when the next request on its connection starts or the connection closes, so the
    /// last answer of each connection still open (a load generator's pool outlives its run) is
    /// read from the connection table instead.
    #[must_use]
    pub fn exchanges_with_open(&self) -> Vec<Exchange> {
        let mut all = self.exchanges.clone();
        if let Ok(conns) = self.probes.sock_conns() {
            all.extend(
                conns
                    .iter()
                    .filter(|(_, c)| {
                        c.exchange.phase == PHASE_RESPONDING
                            && self.is_server(c.tgid)
                            && c.role != ROLE_CLIENT
                    })
                    .map(|(_, c)| Exchange::of(c.tgid, c)),
            );
        }
        all
    }

    /// Retransmits on the watched connections so far (bounded), for joins with the load
    /// generator's records.
    #[must_use]
    pub fn retransmits(&self) -> &[Retransmit] {
        &self.retransmits
    }

    /// Forgets the exchanges and retransmits kept for joins: a node daemon without load
    /// records to join them with calls it every window, so they cost no memory.
    pub fn forget_joins(&mut self) {
        self.exchanges.clear();
        self.retransmits.clear();
    }

    /// Per-process GPU memory totals.
    #[must_use]
    pub fn gpu_account(&self) -> &GpuMemAccount {
        &self.account
    }

    /// Everything lost so far, kernel and userspace.
    pub fn losses(&self) -> Result<Losses, ProbeError> {
        let r = self.probes.runq_drops()?;
        let s = self.probes.sock_drops()?;
        let c = self.probes.cuda_drops()?;
        let ch = |d: Option<&std::sync::Arc<ChannelDrops>>| d.map_or(0, |d| d.get());
        Ok(Losses {
            runq: r.start_full + r.hist_full,
            sockets: s.ringbuf_full + s.conns_full + self.accepts.dropped,
            cuda: c.ringbuf_full + c.pending_full + c.counts_full,
            hooks: self.probes.hook_losses()?,
            channels: ch(self.sock.as_ref().map(|r| &r.drops))
                + ch(self.cuda.as_ref().map(|r| &r.drops)),
            ..Losses::default()
        })
    }

    fn is_server(&self, tgid: u32) -> bool {
        self.opts.servers.contains(&tgid)
    }

    /// Moves every event waiting in the readers into the window accumulators.
    pub fn drain(&mut self) {
        let mut socks = Vec::new();
        if let Some(r) = self.sock.as_mut() {
            drain_into(&mut r.rx, &mut socks);
        }
        for ev in &socks {
            self.on_sock(ev);
        }
        let mut cudas = Vec::new();
        if let Some(r) = self.cuda.as_mut() {
            drain_into(&mut r.rx, &mut cudas);
        }
        for ev in &cudas {
            self.on_cuda(ev);
        }
    }

    fn on_sock(&mut self, ev: &SockEvent) {
        let ours = self.is_server(ev.tgid) || Some(ev.tgid) == self.opts.loadgen;
        let Some(kind) = SockEventKind::decode(ev.kind) else {
            return;
        };
        // The first event of an accepted socket that names its process settles whose accept it
        // was (a close with no process: nobody watched ever read from it).
        if ev.tgid != 0
            && let Some(ms) = self.accepts.owned(ev.skaddr)
        {
            self.count_accept(ev.tgid, ms);
        }
        match kind {
            SockEventKind::Accept => {
                self.accepts
                    .accepted(ev.skaddr, ev.duration_ns as f64 / 1e6);
            }
            // connect() names its caller: a server's own outgoing connection, or the load
            // generator's (every part's when there is one).
            SockEventKind::Connect if ours => {
                if self.is_server(ev.tgid)
                    && let Some((local, _)) = endpoints(&ev.conn.tuple)
                {
                    self.callers.insert(local, ev.tgid);
                }
                let p = if self.is_server(ev.tgid) {
                    self.pending.entry(ev.tgid).or_default()
                } else {
                    &mut self.shared
                };
                p.connected(ev.duration_ns as f64 / 1e6);
            }
            // A server's own calls out (a gateway calling its services) are not its exchanges.
            SockEventKind::Request if self.is_server(ev.tgid) && ev.conn.role != ROLE_CLIENT => {
                let ex = ev.conn.exchange;
                let exchange = Exchange::of(ev.tgid, &ev.conn);
                let p = self.pending.entry(ev.tgid).or_default();
                let ms = |ns: u64| ns as f64 / 1e6;
                p.ttfb_ms
                    .push(ms(ex.first_out_ns.saturating_sub(ex.req_in_ns)));
                p.first_token_ms.push(ms(exchange.first_token_ns()));
                let caller = endpoints(&ev.conn.tuple).and_then(|(_, r)| self.callers.get(&r));
                if caller.is_some_and(|&t| t != ev.tgid) {
                    p.called_first_token_ms.push(ms(exchange.first_token_ns()));
                }
                p.exchange_ms
                    .push(ms(ex.last_out_ns.saturating_sub(ex.req_in_ns)));
                p.retrans_exchanges += u64::from(exchange.retrans > 0);
                self.joins_dropped += bounded_push(&mut self.exchanges, exchange);
            }
            SockEventKind::Retrans if ours => {
                if let Some((local, remote)) = endpoints(&ev.conn.tuple) {
                    let client = if self.is_server(ev.tgid) {
                        remote
                    } else {
                        local
                    };
                    self.joins_dropped += bounded_push(
                        &mut self.retransmits,
                        Retransmit {
                            ts_ns: ev.ts_ns,
                            client,
                        },
                    );
                }
            }
            SockEventKind::Close => {
                let last = self.last_conn.remove(&ev.skaddr).unwrap_or_default();
                if ours {
                    self.closed.entry(ev.tgid).or_default().add(&ev.conn, last);
                }
                if self.is_server(ev.tgid) {
                    let p = self.pending.entry(ev.tgid).or_default();
                    p.lifetime_ms.push(ev.duration_ns as f64 / 1e6);
                }
                let _ = self.accepts.owned(ev.skaddr);
            }
            _ => {}
        }
    }

    /// An accept of `tgid`'s: counted when it is a watched server.
    fn count_accept(&mut self, tgid: u32, ms: f64) {
        if self.is_server(tgid) {
            self.pending.entry(tgid).or_default().connected(ms);
        }
    }

    /// Accepts still waiting whose socket a process took since: the kernel's connection table
    /// names it before the socket's first exchange ends.
    fn settle_accepts(&mut self) {
        if self.accepts.is_empty() {
            return;
        }
        let Ok(conns) = self.probes.sock_conns() else {
            return;
        };
        for (sk, c) in conns {
            if c.tgid != 0
                && let Some(ms) = self.accepts.owned(sk)
            {
                self.count_accept(c.tgid, ms);
            }
        }
    }

    fn on_cuda(&mut self, ev: &CudaEvent) {
        let call = CudaCall::of(ev.api, ev.ret);
        if !self.is_server(ev.tgid) && call != Some(CudaCall::Xid) {
            return;
        }
        self.account.apply(ev);
        let g = if call == Some(CudaCall::Xid) {
            &mut self.shared.gpu
        } else {
            &mut self.pending.entry(ev.tgid).or_default().gpu
        };
        match call {
            Some(CudaCall::Alloc(AllocOutcome::Ok)) => g.allocs += 1,
            Some(
                CudaCall::Alloc(AllocOutcome::OutOfMemory)
                | CudaCall::Map(AllocOutcome::OutOfMemory),
            ) => g.oom += 1,
            Some(CudaCall::Free) => g.frees += 1,
            Some(CudaCall::Sync) => g.sync_ms += ev.duration_ns as f64 / 1e6,
            Some(CudaCall::Xid) => {
                g.xids += 1;
                // The event's kernel time on the wall clock: now less its age.
                let age_ms = crate::clock::monotonic_ns().saturating_sub(ev.ts_ns) / 1_000_000;
                g.xid_events.push(XidEvent {
                    unix_ms: crate::clock::unix_ms().saturating_sub(age_ms),
                    code: Some(ev.size),
                    gpu: None,
                    source: XidSource::Kernel,
                });
            }
            Some(
                CudaCall::Alloc(AllocOutcome::Failed)
                | CudaCall::Map(_)
                | CudaCall::Unmap
                | CudaCall::Counted,
            )
            | None => {}
        }
    }

    /// Fills each part's window with the kernel signals of its processes since the previous
    /// call, and resets. The load generator's connections go to the server when there is one
    /// part; an accept counts for the server that took its socket ([`Accepts`]); XIDs (a GPU
    /// fault, node-wide) go to every part.
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
            .filter_map(|&p| Some((p, super::procfs::cpu_ms(p)?)))
            .collect();
        let threads_now: HashMap<u32, (u32, f64)> = self
            .opts
            .servers
            .iter()
            .flat_map(|&p| {
                super::procfs::thread_cpu_ms(p)
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
                    p50_us: server.quantile_us(0.5).unwrap_or(0.0),
                    p99_us: server.quantile_us(0.99).unwrap_or(0.0),
                    mean_us: server.mean_us(),
                    total_ms: server.0.sum_us as f64 / 1000.0,
                    own_ms: Some(server.0.self_us as f64 / 1000.0),
                    loadgen_p99_us: lg.and_then(|h| h.quantile_us(0.99)),
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

    /// Forgets run-queue histograms of exited processes.
    pub fn prune(&mut self) -> Result<(), ProbeError> {
        self.probes.runq_prune(super::procfs::alive)?;
        Ok(())
    }
}

/// A connection's running counts, as the connection table holds them.
#[derive(Debug, Clone, Copy, Default)]
struct ConnCounts {
    rtt_samples: u64,
    srtt_sum_us: u64,
    retrans: u32,
}

impl ConnCounts {
    fn of(c: &Conn) -> Self {
        Self {
            rtt_samples: c.rtt_samples,
            srtt_sum_us: c.srtt_sum_us,
            retrans: c.retrans,
        }
    }
}

/// RTT samples and retransmits of a process's connections over one window.
#[derive(Debug, Clone, Copy, Default)]
struct Path {
    samples: u64,
    srtt_sum_us: u64,
    srtt_max_us: u32,
    retrans: u64,
}

impl Path {
    /// Adds what `c` gained since `last`.
    fn add(&mut self, c: &Conn, last: ConnCounts) {
        self.samples += c.rtt_samples.saturating_sub(last.rtt_samples);
        self.srtt_sum_us += c.srtt_sum_us.saturating_sub(last.srtt_sum_us);
        self.retrans += u64::from(c.retrans.saturating_sub(last.retrans));
        if c.rtt_samples > last.rtt_samples {
            self.srtt_max_us = self.srtt_max_us.max(c.srtt_last_us);
        }
    }

    fn merge(&mut self, o: &Path) {
        self.samples += o.samples;
        self.srtt_sum_us += o.srtt_sum_us;
        self.srtt_max_us = self.srtt_max_us.max(o.srtt_max_us);
        self.retrans += o.retrans;
    }
}

/// Appends `v`, dropping the oldest tenth first when [`MAX_EXCHANGES`] are kept; returns how
/// many were dropped.
fn bounded_push<T>(list: &mut Vec<T>, v: T) -> u64 {
    let mut dropped = 0;
    if list.len() >= MAX_EXCHANGES {
        list.drain(..MAX_EXCHANGES / 10);
        dropped = (MAX_EXCHANGES / 10) as u64;
    }
    list.push(v);
    dropped
}

/// Sets the exchange and connect statistics of a window from its events.
fn fill_net(net: &mut NetSignals, p: Pending) {
    let sorted = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v
    };
    let (connect, ttfb, first, whole, lifetime, called) = (
        sorted(p.connect_ms),
        sorted(p.ttfb_ms),
        sorted(p.first_token_ms),
        sorted(p.exchange_ms),
        sorted(p.lifetime_ms),
        sorted(p.called_first_token_ms),
    );
    net.connects = p.connects;
    net.connect_p99_ms = quantile(&connect, 0.99);
    net.closes = lifetime.len() as u64;
    net.lifetime_p50_ms = quantile(&lifetime, 0.5);
    net.exchanges = ttfb.len() as u64;
    net.retrans_exchanges = p.retrans_exchanges;
    net.server_ttfb_p50_ms = quantile(&ttfb, 0.5);
    net.server_first_token_p50_ms = quantile(&first, 0.5);
    net.server_first_token_p95_ms = quantile(&first, 0.95);
    net.exchange_p50_ms = quantile(&whole, 0.5);
    net.exchange_p99_ms = quantile(&whole, 0.99);
    net.called_exchanges = called.len() as u64;
    net.called_first_token_p50_ms = quantile(&called, 0.5);
}

fn drain_into<T>(rx: &mut Receiver<T>, out: &mut Vec<T>) {
    while let Ok(v) = rx.try_recv() {
        out.push(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_join_list_drops_its_oldest_tenth_and_counts_them() {
        let mut list: Vec<u32> = Vec::new();
        let dropped: u64 = (0..=MAX_EXCHANGES as u32)
            .map(|i| bounded_push(&mut list, i))
            .sum();
        assert_eq!(dropped, (MAX_EXCHANGES / 10) as u64);
        assert_eq!(
            list[0],
            (MAX_EXCHANGES / 10) as u32,
            "the oldest went first"
        );
        assert_eq!(list.len(), MAX_EXCHANGES - MAX_EXCHANGES / 10 + 1);
    }
}

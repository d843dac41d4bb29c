//! Kernel signals of the watched processes, folded into time-line windows: run-queue delay,
//! TCP (connect latency, smoothed RTT, retransmits, server-side request timing) and CUDA
//! driver calls. Owns the loaded probes and the readers of their ring buffers.

mod close;
mod events;
mod exchange;
mod losses;
mod path;
mod pending;

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    os::unix::fs::MetadataExt as _,
    path::PathBuf,
};

use probe_common::{
    cuda::{CudaEvent, EntryCounts},
    sockets::{PHASE_RESPONDING, ROLE_CLIENT, SockEvent},
};

use super::{accepts::Accepts, cuda::GpuMemAccount, runq::RunqHist};
use crate::probes::{
    Family, HookStatus, ProbeError, Probes,
    cuda::discover_libcuda,
    reader::{ChannelDrops, Reader},
};
use path::{ConnCounts, Path};
use pending::Pending;

pub use exchange::{Exchange, Retransmit};
pub use losses::{LossCount, Losses};

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
    /// (the oldest first) past `MAX_EXCHANGES`, in one line; `None` when none were.
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
                    .map(|(_, c)| Exchange::of(c.tgid, c, self.caller(c.tgid, c))),
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
    /// Forgets run-queue histograms of exited processes.
    pub fn prune(&mut self) -> Result<(), ProbeError> {
        self.probes.runq_prune(super::procfs::alive)?;
        Ok(())
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

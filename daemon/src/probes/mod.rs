//! Load and attach inferscope's eBPF programs (aya), probe kernel features by attaching, and
//! read what the programs recorded. One module per hook family; [`Probes`] owns the one loaded
//! object and reports, per hook, whether it is attached and why not.

use std::{collections::HashSet, sync::Arc};

use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, HashMap, MapData, PerCpuArray},
};
use btf::{Btf, VMLINUX};

pub mod btf;
pub mod cuda;
mod errors;
pub mod privileges;
pub mod reader;
pub mod runqlat;
pub mod sockets;
pub mod tracefs;

pub use errors::{HookState, HookStatus, ProbeError};

/// The kernel programs, built by `build.rs` from `probe-ebpf`.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/probe"));

/// A global of the kernel object: name, value, size in bytes (4 or 8).
pub(crate) type Global = (&'static str, u64, usize);

/// A hook family that can be attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// Scheduler run-queue latency.
    Runqlat,
    /// TCP connections and server-side request timing.
    Sockets,
    /// CUDA driver API uprobes and XID errors.
    Cuda,
}

/// What one hook (a tracepoint or a CUDA driver function) could not record, of one kind; only
/// grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct HookLoss {
    /// The hook family: `runqlat`, `sockets` or `cuda`.
    pub family: &'static str,
    /// The hook, e.g. `sock:inet_sock_set_state` or `cuMemAlloc_v2`.
    pub hook: &'static str,
    /// What was lost, e.g. `ringbuf_full` (the ring buffer was full) or `conns_full`.
    pub reason: &'static str,
    /// How many, since the programs were loaded.
    pub count: u64,
}

/// A family's drops map and the `(hook, kind)` pairs its programs count (`LOSSES` in
/// `probe_common`), with their names.
pub struct LossTable {
    /// The family, as [`HookLoss::family`].
    pub family: &'static str,
    /// The per-CPU drops map.
    pub map: &'static str,
    /// Drop kinds per hook (the map's stride).
    pub kinds: u32,
    /// Every `(hook, kind)` its programs can count.
    pub losses: &'static [(u32, u32)],
    /// Hook names, by hook.
    pub hooks: &'static [&'static str],
    /// Kind names, by kind.
    pub reasons: &'static [&'static str],
}

impl LossTable {
    /// The run-queue programs.
    pub const RUNQLAT: LossTable = {
        use probe_common::runqlat as rq;
        LossTable {
            family: "runqlat",
            map: rq::MAP_DROPS,
            kinds: rq::DROP_KINDS,
            losses: &rq::LOSSES,
            hooks: &rq::HOOK_NAMES,
            reasons: &rq::DROP_NAMES,
        }
    };
    /// The socket programs.
    pub const SOCKETS: LossTable = {
        use probe_common::sockets as so;
        LossTable {
            family: "sockets",
            map: so::MAP_DROPS,
            kinds: so::DROP_KINDS,
            losses: &so::LOSSES,
            hooks: &so::HOOK_NAMES,
            reasons: &so::DROP_NAMES,
        }
    };
    /// The CUDA uprobes and the XID tracepoint.
    pub const CUDA: LossTable = {
        use probe_common::cuda as cu;
        LossTable {
            family: "cuda",
            map: cu::MAP_DROPS,
            kinds: cu::DROP_KINDS,
            losses: &cu::LOSSES,
            hooks: &cu::HOOK_NAMES,
            reasons: &cu::DROP_NAMES,
        }
    };

    /// Each `(hook, kind)` pair with its count, `count(slot)` reading the map's slot.
    pub fn read<E>(
        &self,
        mut count: impl FnMut(u32) -> Result<u64, E>,
    ) -> Result<Vec<HookLoss>, E> {
        self.losses
            .iter()
            .map(|&(hook, kind)| {
                Ok(HookLoss {
                    family: self.family,
                    hook: self.hooks[hook as usize],
                    reason: self.reasons[kind as usize],
                    count: count(probe_common::drop_slot(hook, kind, self.kinds))?,
                })
            })
            .collect()
    }
}

/// The loaded kernel object: maps exist, programs enter the kernel as families are attached.
pub struct Probes {
    ebpf: Ebpf,
    loaded: HashSet<String>,
    hooks: Vec<HookStatus>,
    /// Why the raw-tracepoint run-queue variant cannot be used (no BTF offsets); `None` when
    /// it can be tried.
    runq_raw_unavailable: Option<Arc<btf::BtfError>>,
}

impl Probes {
    /// Loads the embedded object. Field offsets of every family are read from tracefs here; a
    /// family whose tracepoints are missing is reported and left unattachable.
    pub fn load() -> Result<Self, ProbeError> {
        privileges::require_bpf("loading eBPF programs")?;
        let tracefs = tracefs::ensure_mounted()?;
        let mut globals: Vec<Global> = Vec::new();
        let mut hooks = Vec::new();
        globals.extend(runqlat::globals(&tracefs)?);
        // Raw-tracepoint variants read kernel structs at offsets from this kernel's BTF.
        let btf = Btf::from_file(VMLINUX).map_err(Arc::new);
        let mut offsets = |f: fn(&Btf) -> Result<Vec<Global>, btf::BtfError>| {
            let g = btf.as_ref().map_err(Arc::clone)?;
            globals.extend(f(g).map_err(Arc::new)?);
            Ok::<(), Arc<btf::BtfError>>(())
        };
        let runq_raw_unavailable = offsets(runqlat::raw_globals).err();
        if let Err(why) = offsets(sockets::tcp_sock_globals) {
            tracing::info!("sockets: no RTT, cwnd or lifetime bytes: {why}");
        }
        match sockets::globals(&tracefs) {
            Ok(g) => globals.extend(g),
            Err(e) => hooks.push(HookStatus::detached("sockets", e.to_string())),
        }
        if let Ok(g) = cuda::xid_globals(&tracefs) {
            globals.extend(g);
        }
        raise_memlock_limit();
        let mut loader = EbpfLoader::new();
        let values: Vec<(&str, [u8; 8], usize)> = globals
            .iter()
            .map(|&(n, v, size)| (n, v.to_le_bytes(), size))
            .collect();
        for (name, bytes, size) in &values {
            loader.override_global(name, &bytes[..*size], true);
        }
        let ebpf = loader
            .load(OBJECT)
            .map_err(|e| ProbeError::ebpf("loading the eBPF object", e))?;
        Ok(Self {
            ebpf,
            loaded: HashSet::new(),
            hooks,
            runq_raw_unavailable,
        })
    }

    /// Every hook tried so far, attached or not.
    #[must_use]
    pub fn hooks(&self) -> &[HookStatus] {
        &self.hooks
    }

    /// Attaches a hook family. Runqlat's hooks are required; the others attach hook by hook and
    /// report failures in [`Probes::hooks`] rather than failing.
    pub fn attach(&mut self, family: Family) -> Result<(), ProbeError> {
        match family {
            Family::Runqlat => runqlat::attach(self, runqlat::Variant::Auto),
            Family::Sockets => {
                sockets::attach(self);
                Ok(())
            }
            Family::Cuda => {
                cuda::attach_xid(self);
                Ok(())
            }
        }
    }

    /// Replaces the watch-list shared by all families; empty watches every process.
    pub fn set_watch(&mut self, tgids: &[u32]) -> Result<(), ProbeError> {
        use probe_common::{MAP_WATCH, MAP_WATCH_BITS, MAP_WATCH_MODE, WATCH_BITS_WORDS};
        let err = |e| ProbeError::ebpf("updating the watch-list", e);
        // Off while the list changes, so no process is wrongly skipped or recorded.
        let mut mode: Array<&mut MapData, u32> =
            Array::try_from(self.map_mut(MAP_WATCH_MODE)).map_err(err)?;
        mode.set(0, 0, 0).map_err(err)?;
        let mut watch: HashMap<&mut MapData, u32, u8> =
            HashMap::try_from(self.map_mut(MAP_WATCH)).map_err(err)?;
        let old: Vec<u32> = watch.keys().filter_map(Result::ok).collect();
        for &k in &old {
            watch.remove(&k).map_err(err)?;
        }
        for &t in tgids {
            watch.insert(t, 1, 0).map_err(err)?;
        }
        // The bitmap copy: clear the words the old list used, then write the new words.
        let mut words: std::collections::BTreeMap<u32, u64> =
            old.iter().map(|&t| (t >> 6, 0)).collect();
        for &t in tgids.iter().filter(|&&t| t >> 6 < WATCH_BITS_WORDS) {
            *words.entry(t >> 6).or_default() |= 1 << (t & 63);
        }
        let mut bits: Array<&mut MapData, u64> =
            Array::try_from(self.map_mut(MAP_WATCH_BITS)).map_err(err)?;
        for (w, v) in words.into_iter().filter(|&(w, _)| w < WATCH_BITS_WORDS) {
            bits.set(w, v, 0).map_err(err)?;
        }
        let mut mode: Array<&mut MapData, u32> =
            Array::try_from(self.map_mut(MAP_WATCH_MODE)).map_err(err)?;
        mode.set(0, u32::from(!tgids.is_empty()), 0).map_err(err)
    }

    pub(crate) fn map(&self, name: &str) -> &aya::maps::Map {
        self.ebpf
            .map(name)
            .unwrap_or_else(|| panic!("map {name} missing from the object"))
    }

    pub(crate) fn map_mut(&mut self, name: &str) -> &mut aya::maps::Map {
        self.ebpf
            .map_mut(name)
            .unwrap_or_else(|| panic!("map {name} missing from the object"))
    }

    pub(crate) fn take_map(&mut self, name: &str) -> Option<aya::maps::Map> {
        self.ebpf.take_map(name)
    }

    /// Starts the reader task of ring buffer `name` (once; `None` afterwards).
    pub(crate) fn events<T: Copy + Send + 'static>(
        &mut self,
        name: &str,
        capacity: usize,
    ) -> Result<Option<reader::Reader<T>>, ProbeError> {
        let Some(map) = self.take_map(name) else {
            return Ok(None);
        };
        let ring = aya::maps::RingBuf::try_from(map)
            .map_err(|e| ProbeError::ebpf(format!("opening {name}"), e))?;
        let reader = reader::spawn(ring, capacity)
            .map_err(|e| ProbeError::ebpf(format!("polling {name}"), e))?;
        Ok(Some(reader))
    }

    /// Sums drop counter `kind` of map `name` over its `hooks` hooks and every CPU (a family's
    /// total of one kind: the map holds one counter per hook and kind, `drop_slot`).
    pub(crate) fn drop_kind_sum(
        &self,
        name: &str,
        kind: u32,
        kinds: u32,
        hooks: u32,
    ) -> Result<u64, ProbeError> {
        (0..hooks).try_fold(0, |sum, h| {
            Ok(sum + self.per_cpu_sum(name, probe_common::drop_slot(h, kind, kinds))?)
        })
    }

    /// What every hook could not record, by hook and kind, summed over CPUs.
    pub fn hook_losses(&self) -> Result<Vec<HookLoss>, ProbeError> {
        let mut out = Vec::new();
        for table in [&LossTable::RUNQLAT, &LossTable::SOCKETS, &LossTable::CUDA] {
            out.extend(table.read(|slot| self.per_cpu_sum(table.map, slot))?);
        }
        Ok(out)
    }

    /// Sums per-CPU counter `index` of map `name`.
    pub(crate) fn per_cpu_sum(&self, name: &str, index: u32) -> Result<u64, ProbeError> {
        let err = |e| ProbeError::ebpf(format!("reading {name}"), e);
        let arr: PerCpuArray<&MapData, u64> = PerCpuArray::try_from(self.map(name)).map_err(err)?;
        Ok(arr.get(&index, 0).map_err(err)?.iter().sum())
    }

    /// Loads program `prog` once (a program may be attached many times).
    fn program<T>(&mut self, prog: &str) -> Result<&mut T, ProbeError>
    where
        for<'a> &'a mut T:
            TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
        T: LoadProgram,
    {
        let what = format!("loading program {prog}");
        let program = self
            .ebpf
            .program_mut(prog)
            .ok_or_else(|| ProbeError::Format {
                event: prog.into(),
                reason: "program missing from the object".into(),
            })?;
        let program: &mut T = program
            .try_into()
            .map_err(|e| ProbeError::ebpf(what.clone(), e))?;
        if self.loaded.insert(prog.to_string()) {
            program
                .load_program()
                .map_err(|e| ProbeError::ebpf(what, e))?;
        }
        Ok(program)
    }

    /// Attaches tracepoint program `prog` to `category:name` and records the outcome.
    pub(crate) fn attach_tracepoint(
        &mut self,
        prog: &str,
        category: &str,
        name: &str,
    ) -> Result<(), ProbeError> {
        let probe = format!("{category}:{name}");
        let result = self
            .program::<aya::programs::TracePoint>(prog)
            .and_then(|p| {
                p.attach(category, name)
                    .map_err(|e| ProbeError::ebpf(format!("attaching to tracepoint {probe}"), e))
            });
        self.record(probe, result.as_ref().err());
        result.map(|_| ())
    }

    /// Attaches raw-tracepoint program `prog` to tracepoint `name`; recorded as `raw:<name>`.
    pub(crate) fn attach_raw_tracepoint(
        &mut self,
        prog: &str,
        name: &str,
    ) -> Result<(), ProbeError> {
        let probe = format!("raw:{name}");
        let result = self
            .program::<aya::programs::RawTracePoint>(prog)
            .and_then(|p| {
                p.attach(name)
                    .map_err(|e| ProbeError::ebpf(format!("attaching to raw tracepoint {name}"), e))
            });
        self.record(probe, result.as_ref().err());
        result.map(|_| ())
    }

    /// Unloads program `prog`, detaching all its links; a no-op when it is not loaded.
    pub(crate) fn unload(&mut self, prog: &str) {
        if self.loaded.remove(prog)
            && let Some(p) = self.ebpf.program_mut(prog)
        {
            // Failure leaves it attached, which only costs time; nothing to report beyond that.
            let _ = match p {
                aya::programs::Program::RawTracePoint(p) => p.unload(),
                aya::programs::Program::TracePoint(p) => p.unload(),
                aya::programs::Program::UProbe(p) => p.unload(),
                _ => Ok(()),
            };
        }
    }

    /// Drops the [`Probes::hooks`] entry of `probe` (after its program was unloaded).
    pub(crate) fn forget_hook(&mut self, probe: &str) {
        self.hooks.retain(|h| h.probe != probe);
    }

    /// Notes a hook's outcome for [`Probes::hooks`].
    pub(crate) fn record(&mut self, probe: String, err: Option<&ProbeError>) {
        self.hooks.push(match err {
            None => HookStatus::attached(probe),
            Some(e) => HookStatus::detached(probe, e.to_string()),
        });
    }
}

/// Programs that can be loaded into the kernel.
pub(crate) trait LoadProgram {
    fn load_program(&mut self) -> Result<(), aya::programs::ProgramError>;
}

impl LoadProgram for aya::programs::TracePoint {
    fn load_program(&mut self) -> Result<(), aya::programs::ProgramError> {
        self.load()
    }
}

impl LoadProgram for aya::programs::RawTracePoint {
    fn load_program(&mut self) -> Result<(), aya::programs::ProgramError> {
        self.load()
    }
}

impl LoadProgram for aya::programs::UProbe {
    fn load_program(&mut self) -> Result<(), aya::programs::ProgramError> {
        self.load()
    }
}

/// Kernels before 5.11 charge BPF maps to `RLIMIT_MEMLOCK`; lift it so they load there too.
fn raise_memlock_limit() {
    let lim = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: plain syscall with a valid pointer; failure is harmless on current kernels.
    unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &raw const lim) };
}

#[cfg(test)]
mod loss_tests {
    use super::*;

    /// Each `(hook, kind)` a program counts has its own slot inside its map, and is exported
    /// under its hook's and kind's names: losses are per hook, not per family.
    #[test]
    fn every_hook_loss_has_its_own_slot_and_name() {
        use probe_common::{cuda as cu, runqlat as rq, sockets as so};
        for (table, slots) in [
            (&LossTable::RUNQLAT, rq::HOOKS * rq::DROP_KINDS),
            (&LossTable::SOCKETS, so::HOOKS * so::DROP_KINDS),
            (&LossTable::CUDA, cu::HOOKS * cu::DROP_KINDS),
        ] {
            let mut seen = Vec::new();
            let losses = table
                .read(|slot| {
                    assert!(
                        slot < slots,
                        "{}: slot {slot} outside the map",
                        table.family
                    );
                    assert!(!seen.contains(&slot), "{}: slot {slot} twice", table.family);
                    seen.push(slot);
                    Ok::<u64, ()>(u64::from(slot))
                })
                .unwrap();
            assert_eq!(losses.len(), table.losses.len());
            assert!(losses.iter().all(|l| l.family == table.family));
        }
        let sock = LossTable::SOCKETS
            .read(|s| Ok::<u64, ()>(u64::from(s)))
            .unwrap();
        let hooks: Vec<(&str, &str, u64)> =
            sock.iter().map(|l| (l.hook, l.reason, l.count)).collect();
        assert_eq!(
            hooks,
            [
                ("sock:inet_sock_set_state", "ringbuf_full", 0),
                ("sock:inet_sock_set_state", "conns_full", 1),
                ("tcp:tcp_retransmit_skb", "ringbuf_full", 2),
                ("sock:sock_recv_length", "ringbuf_full", 4),
            ]
        );
        let cuda = LossTable::CUDA
            .read(|s| Ok::<u64, ()>(u64::from(s)))
            .unwrap();
        assert!(cuda.contains(&HookLoss {
            family: "cuda",
            hook: "cuLaunchKernel",
            reason: "counts_full",
            count: u64::from(probe_common::drop_slot(
                cu::api::LAUNCH_KERNEL,
                cu::DROP_COUNTS_FULL,
                cu::DROP_KINDS
            )),
        }));
        assert!(cuda.iter().all(|l| l.hook != "unknown"));
    }

    /// The per-hook counts reach `/metrics` as one series per hook and reason of the one drop
    /// family, next to NVML's and the scrapers'.
    #[test]
    fn hook_losses_are_exported_per_hook() {
        use crate::collect::kernel::Losses;
        use crate::export::prometheus::{DropCounter, Snapshot, render};
        let hooks = LossTable::RUNQLAT
            .read(|s| Ok::<u64, ()>(if s == 0 { 5 } else { 0 }))
            .unwrap();
        let losses = Losses {
            hooks,
            ..Losses::default()
        };
        let drops: Vec<DropCounter> = losses
            .labelled()
            .into_iter()
            .map(DropCounter::from)
            .collect();
        let text = render(&Snapshot {
            series: &[],
            probes: &[],
            drops: &drops,
        });
        assert!(
            text.contains(
                "inferscope_dropped_total{stage=\"kernel\",what=\"runqlat\",\
                 hook=\"sched:sched_wakeup\",reason=\"start_full\"} 5\n"
            ),
            "{text}"
        );
        assert!(text.contains(
            "inferscope_dropped_total{stage=\"kernel\",what=\"runqlat\",\
             hook=\"raw_tp:sched_switch\",reason=\"hist_full\"} 0\n"
        ));
        assert_eq!(text.matches("# TYPE inferscope_dropped_total").count(), 1);
    }
}

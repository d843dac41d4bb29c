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

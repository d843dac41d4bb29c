//! CUDA driver API uprobes and the `nvidia:nvidia_dev_xid` tracepoint.
//!
//! Targets are libraries or binaries exporting the driver API: every distinct `libcuda.so*`
//! inode mapped by a process (through its host-visible `/proc/<pid>/root/...` path, so
//! containers are covered), explicit paths, and `inferscope sim`'s simulated device.

use std::{
    collections::{BTreeMap, HashSet},
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
};

use aya::{
    maps::{HashMap, MapData},
    programs::{
        UProbe,
        uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeScope},
    },
};
use probe_common::cuda::{self as cu, CudaEvent, EntryCounts, api};

use super::{Global, ProbeError, Probes, reader::Reader, tracefs::Format};

/// `(symbol, program, api id)`: every driver entry point inferscope hooks. The `_ptsz` exports
/// are what the runtime resolves with the per-thread default stream.
pub const SYMBOLS: [(&str, &str, u32); 35] = [
    ("cuMemAlloc_v2", "cuda_alloc", api::MEM_ALLOC),
    ("cuMemAlloc_v2", "cuda_alloc_ret", api::MEM_ALLOC),
    ("cuMemAllocAsync", "cuda_alloc", api::MEM_ALLOC_ASYNC),
    ("cuMemAllocAsync", "cuda_alloc_ret", api::MEM_ALLOC_ASYNC),
    ("cuMemAllocAsync_ptsz", "cuda_alloc", api::MEM_ALLOC_ASYNC),
    (
        "cuMemAllocAsync_ptsz",
        "cuda_alloc_ret",
        api::MEM_ALLOC_ASYNC,
    ),
    ("cuMemCreate", "cuda_alloc", api::MEM_CREATE),
    ("cuMemCreate", "cuda_alloc_ret", api::MEM_CREATE),
    ("cuMemFree_v2", "cuda_free", api::MEM_FREE),
    ("cuMemFreeAsync", "cuda_free", api::MEM_FREE_ASYNC),
    ("cuMemFreeAsync_ptsz", "cuda_free", api::MEM_FREE_ASYNC),
    ("cuMemRelease", "cuda_free", api::MEM_RELEASE),
    ("cuMemMap", "cuda_map", api::MEM_MAP),
    ("cuMemMap", "cuda_alloc_ret", api::MEM_MAP),
    ("cuMemUnmap", "cuda_free", api::MEM_UNMAP),
    ("cuLaunchKernel", "cuda_launch", api::LAUNCH_KERNEL),
    ("cuLaunchKernel_ptsz", "cuda_launch", api::LAUNCH_KERNEL),
    ("cuLaunchKernelEx", "cuda_launch", api::LAUNCH_KERNEL_EX),
    (
        "cuLaunchKernelEx_ptsz",
        "cuda_launch",
        api::LAUNCH_KERNEL_EX,
    ),
    ("cuGraphLaunch", "cuda_launch", api::GRAPH_LAUNCH),
    ("cuGraphLaunch_ptsz", "cuda_launch", api::GRAPH_LAUNCH),
    ("cuMemcpyHtoDAsync_v2", "cuda_copy", api::MEMCPY_HTOD_ASYNC),
    (
        "cuMemcpyHtoDAsync_v2_ptsz",
        "cuda_copy",
        api::MEMCPY_HTOD_ASYNC,
    ),
    ("cuMemcpyDtoHAsync_v2", "cuda_copy", api::MEMCPY_DTOH_ASYNC),
    (
        "cuMemcpyDtoHAsync_v2_ptsz",
        "cuda_copy",
        api::MEMCPY_DTOH_ASYNC,
    ),
    ("cuStreamSynchronize", "cuda_sync", api::STREAM_SYNC),
    ("cuStreamSynchronize", "cuda_sync_ret", api::STREAM_SYNC),
    ("cuStreamSynchronize_ptsz", "cuda_sync", api::STREAM_SYNC),
    (
        "cuStreamSynchronize_ptsz",
        "cuda_sync_ret",
        api::STREAM_SYNC,
    ),
    ("cuCtxSynchronize", "cuda_sync", api::CTX_SYNC),
    ("cuCtxSynchronize", "cuda_sync_ret", api::CTX_SYNC),
    // CUDA 13's `cudaDeviceSynchronize` (what `torch.cuda.synchronize()` calls) reaches the
    // driver here, not through `cuCtxSynchronize`: hooking only the latter read 0 s of sync
    // behind 100 synchronizes on an H200 (driver 580, CUDA 13 runtime).
    ("cuCtxSynchronize_v2", "cuda_sync", api::CTX_SYNC),
    ("cuCtxSynchronize_v2", "cuda_sync_ret", api::CTX_SYNC),
    ("cuEventSynchronize", "cuda_sync", api::EVENT_SYNC),
    ("cuEventSynchronize", "cuda_sync_ret", api::EVENT_SYNC),
];

/// Counters of what the CUDA programs could not record; they only grow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Drops {
    /// Events lost because the ring buffer was full.
    pub ringbuf_full: u64,
    /// Calls whose return could not be matched (pending map full).
    pub pending_full: u64,
    /// Calls of processes whose launches and copies could not be counted (map full).
    pub counts_full: u64,
}

pub(crate) fn xid_globals(tracefs: &Path) -> Result<Vec<Global>, ProbeError> {
    let f = Format::read(tracefs, "nvidia", "nvidia_dev_xid")?;
    Ok(vec![(
        cu::XID_CODE_OFF,
        u64::from(f.field("error_code")?.offset),
        4,
    )])
}

/// The XID tracepoint exists only with NVIDIA's driver loaded.
pub(crate) fn attach_xid(probes: &mut Probes) {
    let present = super::tracefs::ensure_mounted().is_ok_and(|t| xid_globals(&t).is_ok());
    if present {
        let _ = probes.attach_tracepoint("nvidia_xid", "nvidia", "nvidia_dev_xid");
    } else {
        let err = ProbeError::MissingTracepoint {
            event: "nvidia:nvidia_dev_xid".into(),
        };
        probes.record("nvidia:nvidia_dev_xid".into(), Some(&err));
    }
}

/// Every distinct `libcuda.so*` mapped by a running process, as host-visible paths
/// (`/proc/<pid>/root/<path>`), one per inode.
#[must_use]
pub fn discover_libcuda() -> Vec<PathBuf> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in procs.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
            continue;
        };
        for path in libcuda_paths(&maps) {
            let host = PathBuf::from(format!("/proc/{pid}/root{path}"));
            if let Ok(md) = std::fs::metadata(&host)
                && seen.insert((md.dev(), md.ino()))
            {
                out.push(host);
            }
        }
    }
    out
}

/// Paths of `libcuda.so*` in a `/proc/<pid>/maps` text.
fn libcuda_paths(maps: &str) -> Vec<&str> {
    let mut v: Vec<&str> = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter(|p| {
            Path::new(p)
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libcuda.so"))
        })
        .collect();
    v.dedup();
    v
}

impl Probes {
    /// Attaches the driver-API uprobes to `target` (a library or binary). Symbols the target
    /// does not export are skipped; returns how many hooks attached. Outcomes per hook are in
    /// [`Probes::hooks`].
    pub fn attach_cuda_target(&mut self, target: &Path) -> usize {
        let mut attached = 0;
        let names: Vec<&str> = SYMBOLS.iter().map(|s| s.0).collect();
        let present = defined_symbols(target, &names);
        for (symbol, prog, api_id) in SYMBOLS {
            if !present.contains(symbol) {
                continue;
            }
            let probe = format!(
                "{symbol}@{}{}",
                target.display(),
                if prog.ends_with("_ret") {
                    " (return)"
                } else {
                    ""
                }
            );
            let result = self.program::<UProbe>(prog).and_then(|p| {
                let point = UProbeAttachPoint {
                    location: UProbeAttachLocation::Symbol(symbol),
                    cookie: Some(u64::from(api_id)),
                };
                p.attach(point, target, UProbeScope::AllProcesses)
                    .map_err(|e| {
                        ProbeError::ebpf(
                            format!("attaching uprobe {symbol} in {}", target.display()),
                            e,
                        )
                    })
            });
            attached += usize::from(result.is_ok());
            self.record(probe, result.err().as_ref());
        }
        attached
    }

    /// Starts the reader of CUDA events (once; `None` afterwards). Needs a tokio runtime.
    pub fn cuda_events(
        &mut self,
        capacity: usize,
    ) -> Result<Option<Reader<CudaEvent>>, ProbeError> {
        self.events(cu::MAP_EVENTS, capacity)
    }

    /// Cumulative launch and async-copy counts per tgid.
    pub fn cuda_counts(&self) -> Result<BTreeMap<u32, EntryCounts>, ProbeError> {
        let err = |e| ProbeError::ebpf("reading CUDA launch and copy counts", e);
        let m: HashMap<&MapData, u32, EntryCounts> =
            HashMap::try_from(self.map(cu::MAP_COUNTS)).map_err(err)?;
        Ok(m.iter().filter_map(Result::ok).collect())
    }

    /// What the CUDA programs could not record, summed over CPUs.
    pub fn cuda_drops(&self) -> Result<Drops, ProbeError> {
        Ok(Drops {
            ringbuf_full: self.drop_kind_sum(
                cu::MAP_DROPS,
                cu::DROP_RINGBUF,
                cu::DROP_KINDS,
                cu::HOOKS,
            )?,
            pending_full: self.drop_kind_sum(
                cu::MAP_DROPS,
                cu::DROP_PENDING_FULL,
                cu::DROP_KINDS,
                cu::HOOKS,
            )?,
            counts_full: self.drop_kind_sum(
                cu::MAP_DROPS,
                cu::DROP_COUNTS_FULL,
                cu::DROP_KINDS,
                cu::HOOKS,
            )?,
        })
    }
}

/// Whether the ELF file at `path` defines `symbol` (dynamic or static symbol table).
#[must_use]
pub fn exports(path: &Path, symbol: &str) -> bool {
    !defined_symbols(path, &[symbol]).is_empty()
}

/// Which of `wanted` the ELF file at `path` defines, reading and parsing the file once (a debug
/// build of a server can be hundreds of MiB).
fn defined_symbols<'a>(path: &Path, wanted: &[&'a str]) -> HashSet<&'a str> {
    use object::{Object as _, ObjectSymbol as _};
    let Ok(data) = std::fs::read(path) else {
        return HashSet::new();
    };
    let Ok(elf) = object::File::parse(&*data) else {
        return HashSet::new();
    };
    elf.dynamic_symbols()
        .chain(elf.symbols())
        .filter(object::ObjectSymbol::is_definition)
        .filter_map(|s| s.name().ok())
        .filter_map(|n| wanted.iter().find(|w| **w == n).copied())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_libcuda_in_maps() {
        let maps = "7f00-7f10 r-xp 00000000 08:01 1234 /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15\n\
                    7f10-7f20 r--p 00010000 08:01 1234 /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15\n\
                    7f20-7f30 r-xp 00000000 08:01 99 /usr/lib/libcudart.so.12\n\
                    7f30-7f40 rw-p 00000000 00:00 0 \n";
        assert_eq!(
            libcuda_paths(maps),
            vec!["/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"]
        );
    }

    #[test]
    fn every_hooked_symbol_has_a_known_program() {
        let progs = [
            "cuda_alloc",
            "cuda_alloc_ret",
            "cuda_free",
            "cuda_launch",
            "cuda_copy",
            "cuda_map",
            "cuda_sync",
            "cuda_sync_ret",
        ];
        assert!(SYMBOLS.iter().all(|(_, p, _)| progs.contains(p)));
    }
}

//! CUDA driver events -> per-process device-memory accounting and synchronisation time.

use std::collections::HashMap;

use probe_common::cuda::{AllocOutcome, CudaCall, CudaEvent};
use serde::Serialize;

/// Running totals of one process's driver calls.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GpuMemStats {
    /// Successful allocation calls.
    pub allocs: u64,
    /// Free calls.
    pub frees: u64,
    /// Bytes successfully allocated.
    pub bytes_allocated: u64,
    /// Bytes freed (of allocations seen by the probe).
    pub bytes_freed: u64,
    /// Bytes allocated and not yet freed.
    pub live_bytes: u64,
    /// Allocation calls that returned `CUDA_ERROR_OUT_OF_MEMORY`.
    pub oom: u64,
    /// Allocation calls that failed otherwise.
    pub alloc_errors: u64,
    /// Bytes of physical memory mapped into virtual reservations (`cuMemMap`) and not yet
    /// unmapped: what `PyTorch`'s expandable segments and vLLM's sleep mode hold.
    pub mapped_bytes: u64,
    /// Successful map calls.
    pub maps: u64,
    /// Unmap calls.
    pub unmaps: u64,
    /// Synchronisation calls completed.
    pub syncs: u64,
    /// Time blocked in synchronisation, ns.
    pub sync_ns: u64,
    /// XID errors reported by the driver (node-wide; counted on the reporting tgid).
    pub xids: u64,
}

/// Folds CUDA events into per-process totals; remembers live allocations to size frees.
#[derive(Debug, Default)]
pub struct GpuMemAccount {
    stats: HashMap<u32, GpuMemStats>,
    live: HashMap<(u32, u64), u64>,
}

impl GpuMemAccount {
    /// Adds one event.
    pub fn apply(&mut self, ev: &CudaEvent) {
        let s = self.stats.entry(ev.tgid).or_default();
        match CudaCall::of(ev.api, ev.ret) {
            Some(CudaCall::Alloc(AllocOutcome::Ok)) => {
                s.allocs += 1;
                s.bytes_allocated += ev.size;
                s.live_bytes += ev.size;
                self.live.insert((ev.tgid, ev.ptr), ev.size);
            }
            Some(
                CudaCall::Alloc(AllocOutcome::OutOfMemory)
                | CudaCall::Map(AllocOutcome::OutOfMemory),
            ) => s.oom += 1,
            Some(CudaCall::Alloc(AllocOutcome::Failed) | CudaCall::Map(AllocOutcome::Failed)) => {
                s.alloc_errors += 1;
            }
            Some(CudaCall::Free) => {
                s.frees += 1;
                // Frees of allocations made before the probe attached have no known size.
                if let Some(size) = self.live.remove(&(ev.tgid, ev.ptr)) {
                    s.bytes_freed += size;
                    s.live_bytes = s.live_bytes.saturating_sub(size);
                }
            }
            Some(CudaCall::Map(AllocOutcome::Ok)) => {
                s.maps += 1;
                s.mapped_bytes += ev.size;
            }
            Some(CudaCall::Unmap) => {
                s.unmaps += 1;
                // Unmaps of mappings made before the probe attached.
                s.mapped_bytes = s.mapped_bytes.saturating_sub(ev.size);
            }
            Some(CudaCall::Sync) => {
                s.syncs += 1;
                s.sync_ns += ev.duration_ns;
            }
            Some(CudaCall::Xid) => s.xids += 1,
            Some(CudaCall::Counted) | None => {}
        }
    }

    /// Totals of process `tgid`.
    #[must_use]
    pub fn get(&self, tgid: u32) -> Option<&GpuMemStats> {
        self.stats.get(&tgid)
    }

    /// Totals of every process seen.
    pub fn iter(&self) -> impl Iterator<Item = (&u32, &GpuMemStats)> {
        self.stats.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use probe_common::cuda::{CUDA_ERROR_OUT_OF_MEMORY, api};

    fn ev(api: u32, ret: i32, ptr: u64, size: u64) -> CudaEvent {
        CudaEvent {
            api,
            tgid: 7,
            tid: 8,
            ret,
            ts_ns: 0,
            duration_ns: 5,
            ptr,
            size,
        }
    }

    #[test]
    fn live_bytes_follow_allocs_and_frees() {
        let mut a = GpuMemAccount::default();
        a.apply(&ev(api::MEM_ALLOC, 0, 0x1000, 100));
        a.apply(&ev(api::MEM_CREATE, 0, 0x2000, 50));
        a.apply(&ev(api::MEM_ALLOC, CUDA_ERROR_OUT_OF_MEMORY, 0, 1 << 40));
        assert_eq!(a.get(7).unwrap().live_bytes, 150);
        a.apply(&ev(api::MEM_FREE, 0, 0x1000, 0));
        a.apply(&ev(api::MEM_RELEASE, 0, 0x2000, 0));
        a.apply(&ev(api::MEM_FREE, 0, 0x9999, 0)); // allocated before the probe: no size
        a.apply(&ev(api::STREAM_SYNC, 0, 0, 0));
        let s = a.get(7).unwrap();
        assert_eq!(
            (s.allocs, s.frees, s.oom, s.live_bytes, s.bytes_freed),
            (2, 3, 1, 0, 150)
        );
        assert_eq!((s.syncs, s.sync_ns), (1, 5));
    }
}

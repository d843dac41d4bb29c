//! CUDA driver API uprobes (`libcuda.so.1`, or the simulated device's symbols) and the
//! `nvidia:nvidia_dev_xid` tracepoint. The API id of each attachment arrives as its cookie.
//!
//! Allocation, map and synchronisation calls are matched entry -> return by thread id (a
//! process has many threads in the driver at once); frees and unmaps are reported on entry;
//! launches and async copies are only counted, on entry, because they are the hot path.

use aya_ebpf::{
    helpers::{bpf_get_attach_cookie, bpf_ktime_get_ns, bpf_probe_read_user},
    macros::{map, tracepoint, uprobe, uretprobe},
    maps::{HashMap, PerCpuArray, RingBuf},
    programs::{ProbeContext, RetProbeContext, TracePointContext},
};
use probe_common::cuda::{
    CudaEvent, DROP_COUNTS_FULL, DROP_KINDS, DROP_PENDING_FULL, DROP_RINGBUF, EVENTS_BYTES,
    EntryCounts, HOOKS, Pending, api,
};
use probe_common::drop_slot;

use crate::{
    atomic_add,
    watch::{count_drop, current, global, submit_flags, watched},
};

#[unsafe(no_mangle)]
static XID_CODE_OFF: u32 = 0;

#[map]
static CUDA_PENDING: HashMap<u64, Pending> = HashMap::with_max_entries(16_384, 0);
#[map]
static CUDA_COUNTS: HashMap<u32, EntryCounts> = HashMap::with_max_entries(4096, 0);
#[map]
static CUDA_EVENTS: RingBuf = RingBuf::with_byte_size(EVENTS_BYTES, 0);
#[map]
static CUDA_DROPS: PerCpuArray<u64> = PerCpuArray::with_max_entries(HOOKS * DROP_KINDS, 0);

const BPF_NOEXIST: u64 = 1;

/// Writes `ev` to the ring; a full ring is counted against its API's hook.
#[inline(always)]
fn emit(ev: CudaEvent) {
    match CUDA_EVENTS.reserve::<CudaEvent>(0) {
        Some(mut slot) => {
            slot.write(ev);
            slot.submit(submit_flags(&CUDA_EVENTS, EVENTS_BYTES));
        }
        None => count_drop(&CUDA_DROPS, drop_slot(ev.api, DROP_RINGBUF, DROP_KINDS)),
    }
}

#[inline(always)]
fn cookie<C: aya_ebpf::EbpfContext>(ctx: &C) -> u32 {
    // SAFETY: the helper only reads the cookie of the running attachment.
    unsafe { bpf_get_attach_cookie(ctx.as_ptr()) as u32 }
}

#[inline(always)]
fn pid_tgid() -> u64 {
    aya_ebpf::helpers::bpf_get_current_pid_tgid()
}

/// `(out_ptr, size, ...)`: cuMemAlloc_v2, cuMemAllocAsync(_ptsz), cuMemCreate.
#[uprobe]
pub fn cuda_alloc(ctx: ProbeContext) -> u32 {
    let (out_ptr, size) = (
        ctx.arg::<u64>(0).unwrap_or(0),
        ctx.arg::<u64>(1).unwrap_or(0),
    );
    park(cookie(&ctx), out_ptr, size);
    0
}

/// `(ptr, size, offset, handle, flags)`: cuMemMap, parked for its return (`cuda_alloc_ret`,
/// which reads no out-pointer for it).
#[uprobe]
pub fn cuda_map(ctx: ProbeContext) -> u32 {
    park(cookie(&ctx), 0, ctx.arg::<u64>(1).unwrap_or(0));
    0
}

/// Remembers a watched thread's call until its return probe: pending calls are keyed by
/// thread, since a process has many threads inside the driver at once.
#[inline(always)]
fn park(api: u32, out_ptr: u64, size: u64) {
    if !watched(current().0) {
        return;
    }
    let pending = Pending {
        ts_ns: unsafe { bpf_ktime_get_ns() },
        out_ptr,
        size,
        api,
        pad: 0,
    };
    if CUDA_PENDING.insert(&pid_tgid(), &pending, 0).is_err() {
        count_drop(&CUDA_DROPS, drop_slot(api, DROP_PENDING_FULL, DROP_KINDS));
    }
}

#[uretprobe]
pub fn cuda_alloc_ret(ctx: RetProbeContext) -> u32 {
    let key = pid_tgid();
    // SAFETY: the value is copied out before the remove.
    let Some(p) = (unsafe { CUDA_PENDING.get(&key) }).copied() else {
        return 0;
    };
    let _ = CUDA_PENDING.remove(&key);
    let ret: i32 = ctx.ret::<i32>();
    let ptr = if ret == 0 && p.out_ptr != 0 {
        // SAFETY: a user pointer the call just wrote through; a failed read yields 0.
        unsafe { bpf_probe_read_user(p.out_ptr as *const u64) }.unwrap_or(0)
    } else {
        0
    };
    let (tgid, tid) = current();
    let now = unsafe { bpf_ktime_get_ns() };
    emit(CudaEvent {
        api: p.api,
        tgid,
        tid,
        ret,
        ts_ns: p.ts_ns,
        duration_ns: now - p.ts_ns,
        ptr,
        size: p.size,
    });
    0
}

/// `(ptr_or_handle, ...)`: cuMemFree_v2, cuMemFreeAsync(_ptsz), cuMemRelease; `(ptr, size)`:
/// cuMemUnmap.
#[uprobe]
pub fn cuda_free(ctx: ProbeContext) -> u32 {
    let (tgid, tid) = current();
    if !watched(tgid) {
        return 0;
    }
    let api = cookie(&ctx);
    let ptr = ctx.arg::<u64>(0).unwrap_or(0);
    let size = if api == api::MEM_UNMAP {
        ctx.arg::<u64>(1).unwrap_or(0)
    } else {
        0
    };
    let now = unsafe { bpf_ktime_get_ns() };
    emit(CudaEvent {
        api,
        tgid,
        tid,
        ret: 0,
        ts_ns: now,
        duration_ns: 0,
        ptr,
        size,
    });
    0
}

/// The calling process's hot-path counters and the hook's API id, when it is watched; `None`
/// otherwise, or (counted as a drop of the hook) when the map is full.
#[inline(always)]
fn watched_counts(ctx: &ProbeContext) -> Option<(u32, *mut EntryCounts)> {
    let (tgid, _) = current();
    if !watched(tgid) {
        return None;
    }
    let api = cookie(ctx);
    Some((api, counts(tgid, api)?))
}

/// The process's hot-path counters, created on its first call; `None` (counted as a drop of
/// hook `api`) when the map is full.
#[inline(always)]
fn counts(tgid: u32, api: u32) -> Option<*mut EntryCounts> {
    if let Some(c) = CUDA_COUNTS.get_ptr_mut(&tgid) {
        return Some(c);
    }
    let _ = CUDA_COUNTS.insert(&tgid, &EntryCounts::default(), BPF_NOEXIST);
    let c = CUDA_COUNTS.get_ptr_mut(&tgid);
    if c.is_none() {
        count_drop(&CUDA_DROPS, drop_slot(api, DROP_COUNTS_FULL, DROP_KINDS));
    }
    c
}

/// cuLaunchKernel(_ptsz) `(f, gx, gy, gz, ...)`, cuLaunchKernelEx(_ptsz) `(config, ...)` (the
/// config starts with `gridDimX, gridDimY, gridDimZ`), cuGraphLaunch(_ptsz): counted on entry.
#[uprobe]
pub fn cuda_launch(ctx: ProbeContext) -> u32 {
    let Some((api, c)) = watched_counts(&ctx) else {
        return 0;
    };
    let grid = |x: u32, y: u32, z: u32| u64::from(x) * u64::from(y) * u64::from(z);
    // SAFETY: live map value shared across CPUs: atomic adds; the config is a user pointer
    // read with the helper (a failed read counts no blocks).
    unsafe {
        match api {
            api::GRAPH_LAUNCH => atomic_add(&raw mut (*c).graphs, 1),
            api::LAUNCH_KERNEL_EX => {
                atomic_add(&raw mut (*c).kernels, 1);
                atomic_add(&raw mut (*c).kernels_ex, 1);
                let config = ctx.arg::<u64>(0).unwrap_or(0) as *const [u32; 3];
                if let Ok([x, y, z]) = bpf_probe_read_user(config) {
                    atomic_add(&raw mut (*c).blocks, grid(x, y, z));
                }
            }
            _ => {
                atomic_add(&raw mut (*c).kernels, 1);
                let dim = |i: usize| ctx.arg::<u32>(i).unwrap_or(0);
                atomic_add(&raw mut (*c).blocks, grid(dim(1), dim(2), dim(3)));
            }
        }
    }
    0
}

/// cuMemcpyHtoDAsync_v2(_ptsz), cuMemcpyDtoHAsync_v2(_ptsz) `(dst, src, bytes, stream)`: bytes
/// counted on entry (the evidence of KV offloading and swapping).
#[uprobe]
pub fn cuda_copy(ctx: ProbeContext) -> u32 {
    let Some((api, c)) = watched_counts(&ctx) else {
        return 0;
    };
    let bytes = ctx.arg::<u64>(2).unwrap_or(0);
    // SAFETY: live map value shared across CPUs: atomic adds.
    unsafe {
        if api == api::MEMCPY_HTOD_ASYNC {
            atomic_add(&raw mut (*c).h2d_bytes, bytes);
        } else {
            atomic_add(&raw mut (*c).d2h_bytes, bytes);
        }
    }
    0
}

/// cuStreamSynchronize(_ptsz), cuCtxSynchronize(_v2), cuEventSynchronize: entry.
#[uprobe]
pub fn cuda_sync(ctx: ProbeContext) -> u32 {
    park(cookie(&ctx), 0, 0);
    0
}

/// cuStreamSynchronize(_ptsz), cuCtxSynchronize(_v2), cuEventSynchronize: return.
#[uretprobe]
pub fn cuda_sync_ret(ctx: RetProbeContext) -> u32 {
    let key = pid_tgid();
    // SAFETY: the value is copied out before the remove.
    let Some(p) = (unsafe { CUDA_PENDING.get(&key) }).copied() else {
        return 0;
    };
    let _ = CUDA_PENDING.remove(&key);
    let (tgid, tid) = current();
    let now = unsafe { bpf_ktime_get_ns() };
    emit(CudaEvent {
        api: p.api,
        tgid,
        tid,
        ret: ctx.ret::<i32>(),
        ts_ns: p.ts_ns,
        duration_ns: now - p.ts_ns,
        ptr: 0,
        size: 0,
    });
    0
}

/// `nvidia:nvidia_dev_xid`: every XID the driver reports.
#[tracepoint]
pub fn nvidia_xid(ctx: TracePointContext) -> u32 {
    // SAFETY: offset from this kernel's format file.
    let code: u32 = unsafe { ctx.read_at(global(&XID_CODE_OFF) as usize) }.unwrap_or(0);
    let (tgid, tid) = current();
    let now = unsafe { bpf_ktime_get_ns() };
    emit(CudaEvent {
        api: api::XID,
        tgid,
        tid,
        ret: 0,
        ts_ns: now,
        duration_ns: 0,
        ptr: 0,
        size: u64::from(code),
    });
    0
}

//! CUDA driver API calls (`libcuda.so.1`) seen through uprobes, and NVIDIA XID errors.

use crate::assert_size;

/// Ring buffer of [`CudaEvent`]s.
pub const MAP_EVENTS: &str = "CUDA_EVENTS";
/// `pid_tgid -> Pending`: calls in flight, keyed by thread (never by process).
pub const MAP_PENDING: &str = "CUDA_PENDING";
/// `tgid -> EntryCounts`: launches and async copies, counted on entry only (the hot path).
pub const MAP_COUNTS: &str = "CUDA_COUNTS";
/// Per-CPU `u64` counters of what could not be recorded, per hook: slot
/// [`crate::drop_slot`]`(api, DROP_*, DROP_KINDS)`, the hook being the API id ([`api`]) its
/// attachment carries as cookie.
pub const MAP_DROPS: &str = "CUDA_DROPS";

/// Number of hooks: API ids run 1..=[`api::LAST`] (0 is unused).
pub const HOOKS: u32 = api::LAST + 1;
/// Each hook's name, by API id.
pub const HOOK_NAMES: [&str; HOOKS as usize] = [
    "unknown",
    "cuMemAlloc_v2",
    "cuMemAllocAsync",
    "cuMemCreate",
    "cuMemFree_v2",
    "cuMemFreeAsync",
    "cuMemRelease",
    "cuLaunchKernel",
    "cuGraphLaunch",
    "cuStreamSynchronize",
    "cuCtxSynchronize",
    "nvidia:nvidia_dev_xid",
    "cuLaunchKernelEx",
    "cuMemMap",
    "cuMemUnmap",
    "cuEventSynchronize",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
];

/// The ring buffer was full.
pub const DROP_RINGBUF: u32 = 0;
/// [`MAP_PENDING`] was full: a call's return could not be matched.
pub const DROP_PENDING_FULL: u32 = 1;
/// [`MAP_COUNTS`] was full: a process's launches or copies could not be counted.
pub const DROP_COUNTS_FULL: u32 = 2;
/// Number of drop counters per hook.
pub const DROP_KINDS: u32 = 3;
/// Each drop counter's name, by `DROP_*`.
pub const DROP_NAMES: [&str; DROP_KINDS as usize] = ["ringbuf_full", "pending_full", "counts_full"];
/// Every `(api, DROP_*)` pair a program can count: what userspace exports. Allocations, maps
/// and synchronisations park their call (pending) and emit on return; frees, unmaps and XIDs
/// only emit; launches and async copies only count.
pub const LOSSES: [(u32, u32); 24] = [
    (api::MEM_ALLOC, DROP_PENDING_FULL),
    (api::MEM_ALLOC, DROP_RINGBUF),
    (api::MEM_ALLOC_ASYNC, DROP_PENDING_FULL),
    (api::MEM_ALLOC_ASYNC, DROP_RINGBUF),
    (api::MEM_CREATE, DROP_PENDING_FULL),
    (api::MEM_CREATE, DROP_RINGBUF),
    (api::MEM_FREE, DROP_RINGBUF),
    (api::MEM_FREE_ASYNC, DROP_RINGBUF),
    (api::MEM_RELEASE, DROP_RINGBUF),
    (api::LAUNCH_KERNEL, DROP_COUNTS_FULL),
    (api::LAUNCH_KERNEL_EX, DROP_COUNTS_FULL),
    (api::GRAPH_LAUNCH, DROP_COUNTS_FULL),
    (api::MEMCPY_HTOD_ASYNC, DROP_COUNTS_FULL),
    (api::MEMCPY_DTOH_ASYNC, DROP_COUNTS_FULL),
    (api::MEM_MAP, DROP_PENDING_FULL),
    (api::MEM_MAP, DROP_RINGBUF),
    (api::MEM_UNMAP, DROP_RINGBUF),
    (api::EVENT_SYNC, DROP_PENDING_FULL),
    (api::EVENT_SYNC, DROP_RINGBUF),
    (api::STREAM_SYNC, DROP_PENDING_FULL),
    (api::STREAM_SYNC, DROP_RINGBUF),
    (api::CTX_SYNC, DROP_PENDING_FULL),
    (api::CTX_SYNC, DROP_RINGBUF),
    (api::XID, DROP_RINGBUF),
];

/// Size of [`MAP_EVENTS`] in bytes.
pub const EVENTS_BYTES: u32 = 1 << 20;

/// API ids, passed to programs as the attach cookie.
pub mod api {
    /// `cuMemAlloc_v2(CUdeviceptr*, size_t)`.
    pub const MEM_ALLOC: u32 = 1;
    /// `cuMemAllocAsync(_ptsz)(CUdeviceptr*, size_t, CUstream)`.
    pub const MEM_ALLOC_ASYNC: u32 = 2;
    /// `cuMemCreate(CUmemGenericAllocationHandle*, size_t, prop*, flags)`.
    pub const MEM_CREATE: u32 = 3;
    /// `cuMemFree_v2(CUdeviceptr)`.
    pub const MEM_FREE: u32 = 4;
    /// `cuMemFreeAsync(_ptsz)(CUdeviceptr, CUstream)`.
    pub const MEM_FREE_ASYNC: u32 = 5;
    /// `cuMemRelease(handle)`.
    pub const MEM_RELEASE: u32 = 6;
    /// `cuLaunchKernel(_ptsz)`.
    pub const LAUNCH_KERNEL: u32 = 7;
    /// `cuGraphLaunch(_ptsz)`.
    pub const GRAPH_LAUNCH: u32 = 8;
    /// `cuStreamSynchronize(_ptsz)`.
    pub const STREAM_SYNC: u32 = 9;
    /// `cuCtxSynchronize()`, `cuCtxSynchronize_v2(ctx)` (what the CUDA 13 runtime's
    /// `cudaDeviceSynchronize` calls).
    pub const CTX_SYNC: u32 = 10;
    /// `nvidia:nvidia_dev_xid` tracepoint; `size` holds the XID.
    pub const XID: u32 = 11;
    /// `cuLaunchKernelEx(_ptsz)(const CUlaunchConfig*, f, params, extra)`: Triton's launcher,
    /// CUTLASS- and DeepGEMM-style kernels.
    pub const LAUNCH_KERNEL_EX: u32 = 12;
    /// `cuMemMap(ptr, size, offset, handle, flags)`: physical memory behind a virtual
    /// reservation (`PyTorch`'s expandable segments, vLLM's sleep mode).
    pub const MEM_MAP: u32 = 13;
    /// `cuMemUnmap(ptr, size)`.
    pub const MEM_UNMAP: u32 = 14;
    /// `cuEventSynchronize(event)`: engines that overlap the CPU and the GPU wait on events.
    pub const EVENT_SYNC: u32 = 15;
    /// `cuMemcpyHtoDAsync_v2(_ptsz)(dst, src, bytes, stream)`.
    pub const MEMCPY_HTOD_ASYNC: u32 = 16;
    /// `cuMemcpyDtoHAsync_v2(_ptsz)(dst, src, bytes, stream)`.
    pub const MEMCPY_DTOH_ASYNC: u32 = 17;
    /// The last id.
    pub const LAST: u32 = MEMCPY_DTOH_ASYNC;
}

/// What a driver call (or XID) event is, from its `api` id and return code: the one
/// classifier of CUDA events on the user side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CudaCall {
    /// An allocation (`cuMemAlloc*`, `cuMemCreate`), and how it ended.
    Alloc(AllocOutcome),
    /// A free (`cuMemFree*`, `cuMemRelease`).
    Free,
    /// A kernel or graph launch, or an async copy (counted, not emitted).
    Counted,
    /// Physical memory mapped into a virtual reservation, and how it ended.
    Map(AllocOutcome),
    /// Physical memory unmapped.
    Unmap,
    /// A stream or context synchronisation.
    Sync,
    /// An XID error reported by the driver.
    Xid,
}

/// How an allocation call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocOutcome {
    /// It returned success.
    Ok,
    /// `CUDA_ERROR_OUT_OF_MEMORY`.
    OutOfMemory,
    /// Another error.
    Failed,
}

impl CudaCall {
    /// The call an event's `api` id and return code `ret` describe; `None` for an unknown id.
    #[must_use]
    pub fn of(api_id: u32, ret: i32) -> Option<Self> {
        Some(match api_id {
            api::MEM_ALLOC | api::MEM_ALLOC_ASYNC | api::MEM_CREATE => Self::Alloc(match ret {
                0 => AllocOutcome::Ok,
                CUDA_ERROR_OUT_OF_MEMORY => AllocOutcome::OutOfMemory,
                _ => AllocOutcome::Failed,
            }),
            api::MEM_FREE | api::MEM_FREE_ASYNC | api::MEM_RELEASE => Self::Free,
            api::MEM_MAP => Self::Map(match ret {
                0 => AllocOutcome::Ok,
                CUDA_ERROR_OUT_OF_MEMORY => AllocOutcome::OutOfMemory,
                _ => AllocOutcome::Failed,
            }),
            api::MEM_UNMAP => Self::Unmap,
            api::LAUNCH_KERNEL
            | api::LAUNCH_KERNEL_EX
            | api::GRAPH_LAUNCH
            | api::MEMCPY_HTOD_ASYNC
            | api::MEMCPY_DTOH_ASYNC => Self::Counted,
            api::STREAM_SYNC | api::CTX_SYNC | api::EVENT_SYNC => Self::Sync,
            api::XID => Self::Xid,
            _ => return None,
        })
    }
}

/// `CUDA_ERROR_OUT_OF_MEMORY`.
pub const CUDA_ERROR_OUT_OF_MEMORY: i32 = 2;

/// Name of the global with the offset of `error_code` in `nvidia:nvidia_dev_xid`.
pub const XID_CODE_OFF: &str = "XID_CODE_OFF";

/// A call in flight on one thread.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Pending {
    /// Entry time (ktime ns).
    pub ts_ns: u64,
    /// The out-pointer argument (alloc calls) where the result lands; 0 for a map.
    pub out_ptr: u64,
    /// Requested bytes (alloc and map calls).
    pub size: u64,
    /// `api::*`.
    pub api: u32,
    /// Explicit padding.
    pub pad: u32,
}
assert_size!(Pending, 32);

/// Hot-path counters of one process, counted on entry: launches and async copies.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EntryCounts {
    /// Kernel launches: `cuLaunchKernel(_ptsz)` and `cuLaunchKernelEx(_ptsz)` calls.
    pub kernels: u64,
    /// Of those, `cuLaunchKernelEx(_ptsz)` calls.
    pub kernels_ex: u64,
    /// Thread blocks over those launches (grid x * y * z, from the arguments or the launch
    /// config).
    pub blocks: u64,
    /// `cuGraphLaunch(_ptsz)` calls.
    pub graphs: u64,
    /// Bytes of `cuMemcpyHtoDAsync_v2(_ptsz)` calls.
    pub h2d_bytes: u64,
    /// Bytes of `cuMemcpyDtoHAsync_v2(_ptsz)` calls.
    pub d2h_bytes: u64,
}
assert_size!(EntryCounts, 48);

impl EntryCounts {
    /// Each counter applied pairwise with `f`.
    #[must_use]
    pub fn zip(&self, o: &Self, f: fn(u64, u64) -> u64) -> Self {
        Self {
            kernels: f(self.kernels, o.kernels),
            kernels_ex: f(self.kernels_ex, o.kernels_ex),
            blocks: f(self.blocks, o.blocks),
            graphs: f(self.graphs, o.graphs),
            h2d_bytes: f(self.h2d_bytes, o.h2d_bytes),
            d2h_bytes: f(self.d2h_bytes, o.d2h_bytes),
        }
    }
}

/// One completed allocation, free or synchronisation call, or an XID.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CudaEvent {
    /// `api::*`.
    pub api: u32,
    /// Calling process.
    pub tgid: u32,
    /// Calling thread.
    pub tid: u32,
    /// The call's return value (`CUresult`); 0 for frees seen on entry.
    pub ret: i32,
    /// Entry time (ktime ns).
    pub ts_ns: u64,
    /// Time inside the call, ns (0 for frees seen on entry).
    pub duration_ns: u64,
    /// Device pointer or handle allocated or freed; the address unmapped.
    pub ptr: u64,
    /// Bytes requested (allocs), mapped or unmapped; XID code (xid).
    pub size: u64,
}
assert_size!(CudaEvent, 48);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), Copy, explicit padding, every bit pattern valid.
    unsafe impl aya::Pod for super::EntryCounts {}
    unsafe impl aya::Pod for super::CudaEvent {}
}

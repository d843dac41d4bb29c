//! A **simulated** CUDA device. Nothing here touches a GPU.
//!
//! The engine gets its KV pool and per-step workspace through functions exported from the
//! binary under the CUDA driver API's names and C signatures (`cuMemAlloc_v2`, `cuMemFree_v2`,
//! `cuLaunchKernel`, `cuStreamSynchronize`, `cuMemGetInfo_v2`). They are `#[no_mangle]`,
//! `extern "C"` and `#[inline(never)]`, so they stay in the symbol table and inferscope's GPU
//! uprobes attach to them by name exactly as they do on `libcuda.so.1`.
//!
//! Like CUDA, calls act on the calling thread's *current context* ([`Context::make_current`]);
//! a thread without one gets `CUDA_ERROR_INVALID_CONTEXT`. A context has a fixed memory size;
//! an allocation beyond it returns `CUDA_ERROR_OUT_OF_MEMORY` (2). Kernels are "run" by adding
//! their duration to the stream's busy time; `cuStreamSynchronize` blocks until that time.

use std::{
    cell::RefCell,
    collections::HashMap,
    ffi::c_void,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

/// `CUresult` success.
pub const CUDA_SUCCESS: i32 = 0;
/// `CUDA_ERROR_INVALID_VALUE`.
pub const CUDA_ERROR_INVALID_VALUE: i32 = 1;
/// `CUDA_ERROR_OUT_OF_MEMORY`.
pub const CUDA_ERROR_OUT_OF_MEMORY: i32 = 2;
/// `CUDA_ERROR_INVALID_CONTEXT`.
pub const CUDA_ERROR_INVALID_CONTEXT: i32 = 201;

/// Memory accounting of one simulated device.
#[derive(Debug)]
pub struct DeviceState {
    total: u64,
    used: u64,
    next_ptr: u64,
    allocations: HashMap<u64, u64>,
    stream_busy_until: Option<Instant>,
}

/// A simulated device context, shared by the engine thread (which makes it current) and readers.
#[derive(Debug, Clone)]
pub struct Context(Arc<Mutex<DeviceState>>);

thread_local! {
    static CURRENT: RefCell<Option<Context>> = const { RefCell::new(None) };
}

impl Context {
    /// A device with `total` bytes of memory.
    #[must_use]
    pub fn new(total: u64) -> Self {
        Self(Arc::new(Mutex::new(DeviceState {
            total,
            used: 0,
            // Device pointers look like real ones and are never 0.
            next_ptr: 0x7f00_0000_0000,
            allocations: HashMap::new(),
            stream_busy_until: None,
        })))
    }

    /// Makes this the calling thread's current context (like `cuCtxSetCurrent`).
    pub fn make_current(&self) {
        CURRENT.with(|c| *c.borrow_mut() = Some(self.clone()));
    }

    /// Bytes allocated now.
    #[must_use]
    pub fn used(&self) -> u64 {
        self.lock().used
    }

    /// Device memory size.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.lock().total
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, DeviceState> {
        // A panic elsewhere cannot leave the counters half-updated; keep serving.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn with_current<R>(f: impl FnOnce(&mut DeviceState) -> R) -> Option<R> {
    CURRENT.with(|c| c.borrow().as_ref().map(|ctx| f(&mut ctx.lock())))
}

/// `CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)`.
///
/// # Safety
/// `dptr` must be null or valid for a write of a `u64`.
#[unsafe(no_mangle)]
#[inline(never)]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut u64, bytesize: usize) -> i32 {
    if dptr.is_null() || bytesize == 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let r = with_current(|d| {
        let size = bytesize as u64;
        if d.used.saturating_add(size) > d.total {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        let ptr = d.next_ptr;
        // 2 MiB-aligned addresses, like the driver's large allocations.
        d.next_ptr += size.div_ceil(2 << 20) * (2 << 20);
        d.used += size;
        d.allocations.insert(ptr, size);
        Ok(ptr)
    });
    match r {
        None => CUDA_ERROR_INVALID_CONTEXT,
        Some(Err(e)) => e,
        Some(Ok(ptr)) => {
            // SAFETY: checked non-null; the caller guarantees validity.
            unsafe { dptr.write(ptr) };
            CUDA_SUCCESS
        }
    }
}

/// `CUresult cuMemFree_v2(CUdeviceptr dptr)`.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn cuMemFree_v2(dptr: u64) -> i32 {
    with_current(|d| match d.allocations.remove(&dptr) {
        Some(size) => {
            d.used -= size;
            CUDA_SUCCESS
        }
        None => CUDA_ERROR_INVALID_VALUE,
    })
    .unwrap_or(CUDA_ERROR_INVALID_CONTEXT)
}

/// `CUresult cuMemGetInfo_v2(size_t *free, size_t *total)`.
///
/// # Safety
/// `free` and `total` must be null or valid for a write of a `usize`.
#[unsafe(no_mangle)]
#[inline(never)]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> i32 {
    if free.is_null() || total.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    match with_current(|d| (d.total - d.used, d.total)) {
        None => CUDA_ERROR_INVALID_CONTEXT,
        Some((f, t)) => {
            // SAFETY: checked non-null; the caller guarantees validity.
            unsafe {
                free.write(f as usize);
                total.write(t as usize);
            }
            CUDA_SUCCESS
        }
    }
}

/// A simulated kernel: what `CUfunction` points to.
#[derive(Debug)]
#[repr(C)]
pub struct SimKernel {
    /// Name, for humans.
    pub name: &'static str,
}

/// The one kernel the engine launches per step: the model's forward pass.
pub static FORWARD_KERNEL: SimKernel = SimKernel {
    name: "sim_forward",
};

/// `CUresult cuLaunchKernel(CUfunction f, unsigned gridDimX, gridDimY, gridDimZ, blockDimX,
/// blockDimY, blockDimZ, unsigned sharedMemBytes, CUstream hStream, void **kernelParams,
/// void **extra)`.
///
/// The simulated kernel's first parameter (`*kernelParams[0]`) is its duration in nanoseconds
/// (a `u64`); it is queued on the context's single stream.
///
/// # Safety
/// `kernel_params` must be null or point to at least one pointer to a readable `u64`.
#[unsafe(no_mangle)]
#[inline(never)]
#[allow(clippy::too_many_arguments, clippy::similar_names)]
pub unsafe extern "C" fn cuLaunchKernel(
    f: *mut c_void,
    grid_dim_x: u32,
    grid_dim_y: u32,
    grid_dim_z: u32,
    block_dim_x: u32,
    block_dim_y: u32,
    block_dim_z: u32,
    _shared_mem_bytes: u32,
    _h_stream: *mut c_void,
    kernel_params: *mut *mut c_void,
    _extra: *mut *mut c_void,
) -> i32 {
    let dims = [
        grid_dim_x,
        grid_dim_y,
        grid_dim_z,
        block_dim_x,
        block_dim_y,
        block_dim_z,
    ];
    if f.is_null() || kernel_params.is_null() || dims.contains(&0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: the caller guarantees kernel_params[0] points to a u64.
    let ns = unsafe {
        let p = *kernel_params;
        if p.is_null() {
            return CUDA_ERROR_INVALID_VALUE;
        }
        *(p as *const u64)
    };
    with_current(|d| {
        let now = Instant::now();
        let start = d.stream_busy_until.map_or(now, |b| b.max(now));
        d.stream_busy_until = Some(start + Duration::from_nanos(ns));
        CUDA_SUCCESS
    })
    .unwrap_or(CUDA_ERROR_INVALID_CONTEXT)
}

/// `CUresult cuStreamSynchronize(CUstream hStream)`: blocks until queued kernels are done.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn cuStreamSynchronize(_h_stream: *mut c_void) -> i32 {
    let Some(until) = with_current(|d| d.stream_busy_until.take()) else {
        return CUDA_ERROR_INVALID_CONTEXT;
    };
    if let Some(until) = until {
        // Sleep most of the wait (the host thread is blocked, not busy, as with a real sync),
        // then spin the last stretch for precision.
        let spin = Duration::from_micros(200);
        let now = Instant::now();
        if until > now + spin {
            std::thread::sleep(until.saturating_duration_since(now + spin));
        }
        while Instant::now() < until {
            std::hint::spin_loop();
        }
    }
    CUDA_SUCCESS
}

/// Launches the forward kernel for `gpu_time` and waits for it, through the exported symbols.
#[must_use = "a non-zero CUresult means the step did not run"]
pub fn run_forward(gpu_time: Duration) -> i32 {
    let mut ns: u64 = gpu_time.as_nanos() as u64;
    let mut params: [*mut c_void; 1] = [(&raw mut ns).cast()];
    let f = (&raw const FORWARD_KERNEL).cast_mut().cast();
    // SAFETY: params[0] points to a live u64 for the duration of the call.
    let rc = unsafe {
        cuLaunchKernel(
            f,
            1,
            1,
            1,
            128,
            1,
            1,
            0,
            std::ptr::null_mut(),
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    };
    if rc != CUDA_SUCCESS {
        return rc;
    }
    cuStreamSynchronize(std::ptr::null_mut())
}

/// Allocates through `cuMemAlloc_v2`.
pub fn alloc(bytes: u64) -> Result<u64, i32> {
    let mut p = 0u64;
    // SAFETY: &mut p is valid for a u64 write.
    match unsafe { cuMemAlloc_v2(&raw mut p, bytes as usize) } {
        CUDA_SUCCESS => Ok(p),
        e => Err(e),
    }
}

/// Frees through `cuMemFree_v2`.
pub fn free(ptr: u64) -> Result<(), i32> {
    match cuMemFree_v2(ptr) {
        CUDA_SUCCESS => Ok(()),
        e => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oom_beyond_capacity_and_free_returns_memory() {
        std::thread::spawn(|| {
            assert_eq!(alloc(10), Err(CUDA_ERROR_INVALID_CONTEXT));
            let ctx = Context::new(100);
            ctx.make_current();
            let a = alloc(60).unwrap();
            assert_eq!(alloc(50), Err(CUDA_ERROR_OUT_OF_MEMORY));
            let b = alloc(40).unwrap();
            assert_eq!(ctx.used(), 100);
            free(a).unwrap();
            assert_eq!(free(a), Err(CUDA_ERROR_INVALID_VALUE));
            free(b).unwrap();
            assert_eq!(ctx.used(), 0);
            let (mut f, mut t) = (0usize, 0usize);
            // SAFETY: valid pointers.
            assert_eq!(unsafe { cuMemGetInfo_v2(&raw mut f, &raw mut t) }, 0);
            assert_eq!((f, t), (100, 100));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn sync_blocks_for_the_kernel_time() {
        std::thread::spawn(|| {
            Context::new(1).make_current();
            let t0 = Instant::now();
            assert_eq!(run_forward(Duration::from_millis(20)), CUDA_SUCCESS);
            let el = t0.elapsed();
            assert!(
                el >= Duration::from_millis(20) && el < Duration::from_millis(200),
                "{el:?}"
            );
        })
        .join()
        .unwrap();
    }
}

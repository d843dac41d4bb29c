//! Per-step workspace through a caching allocator that behaves like `PyTorch`'s: freed blocks stay
//! cached for reuse; when the device is out of memory it frees every cached block
//! (`cuMemFree_v2` burst) and retries the allocation once before giving up.

use super::device::{self, CUDA_ERROR_OUT_OF_MEMORY};

/// Allocation granularity (`PyTorch` rounds large blocks to 2 MiB).
pub const ROUND: u64 = 2 << 20;

/// The workspace could not be obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("simulated CUDA out of memory: tried to allocate {bytes} bytes (CUresult {code})")]
pub struct OutOfMemory {
    /// Bytes requested.
    pub bytes: u64,
    /// The `CUresult` of the retry.
    pub code: i32,
}

/// Where a step's activations live; the engine asks for them before each step.
pub trait Workspace {
    /// Makes `bytes` of workspace available for the coming step.
    fn reserve(&mut self, bytes: u64) -> Result<(), OutOfMemory>;
}

/// Counters of the allocator's behaviour.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct AllocStats {
    /// Successful `cuMemAlloc_v2` calls.
    pub allocs: u64,
    /// `cuMemAlloc_v2` calls that returned OOM.
    pub ooms: u64,
    /// Times the whole cache was freed to retry.
    pub cache_flushes: u64,
    /// Reservations that failed after the retry.
    pub failures: u64,
}

/// A caching allocator over the current thread's simulated device context.
#[derive(Debug, Default)]
pub struct CachingAllocator {
    // (device pointer, size); every block is free between steps.
    cached: Vec<(u64, u64)>,
    /// What happened so far.
    pub stats: AllocStats,
}

impl CachingAllocator {
    /// Bytes held in the cache.
    #[must_use]
    pub fn cached_bytes(&self) -> u64 {
        self.cached.iter().map(|(_, s)| s).sum()
    }

    /// Frees every cached block.
    pub fn empty_cache(&mut self) {
        for (p, _) in self.cached.drain(..) {
            // Our own pointers from this context: freeing cannot fail.
            let _ = device::free(p);
        }
    }
}

impl Workspace for CachingAllocator {
    fn reserve(&mut self, bytes: u64) -> Result<(), OutOfMemory> {
        if bytes == 0 || self.cached.iter().any(|(_, s)| *s >= bytes) {
            return Ok(());
        }
        let size = bytes.div_ceil(ROUND) * ROUND;
        match device::alloc(size) {
            Ok(p) => {
                self.stats.allocs += 1;
                self.cached.push((p, size));
                return Ok(());
            }
            Err(code) if code != CUDA_ERROR_OUT_OF_MEMORY => {
                self.stats.failures += 1;
                return Err(OutOfMemory { bytes: size, code });
            }
            Err(_) => self.stats.ooms += 1,
        }
        self.stats.cache_flushes += 1;
        self.empty_cache();
        match device::alloc(size) {
            Ok(p) => {
                self.stats.allocs += 1;
                self.cached.push((p, size));
                Ok(())
            }
            Err(code) => {
                if code == CUDA_ERROR_OUT_OF_MEMORY {
                    self.stats.ooms += 1;
                }
                self.stats.failures += 1;
                Err(OutOfMemory { bytes: size, code })
            }
        }
    }
}

impl Drop for CachingAllocator {
    fn drop(&mut self) {
        self.empty_cache();
    }
}

#[cfg(test)]
mod tests {
    use super::super::device::Context;
    use super::*;

    #[test]
    fn grows_then_flushes_and_retries_then_fails() {
        std::thread::spawn(|| {
            let ctx = Context::new(5 * ROUND);
            ctx.make_current();
            let mut a = CachingAllocator::default();
            a.reserve(ROUND).unwrap();
            a.reserve(ROUND / 2).unwrap(); // reused
            assert_eq!(a.stats.allocs, 1);
            a.reserve(2 * ROUND).unwrap(); // new, the old block stays cached
            assert_eq!(ctx.used(), 3 * ROUND);
            // 4 MiB does not fit next to 3 MiB cached: flush, retry, succeed.
            a.reserve(3 * ROUND).unwrap();
            assert_eq!(a.stats.cache_flushes, 1);
            assert_eq!(a.stats.ooms, 1);
            assert_eq!(ctx.used(), 3 * ROUND);
            // Larger than the device: fails after the retry.
            assert_eq!(
                a.reserve(6 * ROUND).unwrap_err().code,
                CUDA_ERROR_OUT_OF_MEMORY
            );
            assert_eq!(a.stats.failures, 1);
            drop(a);
            assert_eq!(ctx.used(), 0);
        })
        .join()
        .unwrap();
    }
}

//! CUDA driver-API uprobes against a test double: a C program built here that exports
//! functions with the driver API's names and signatures (it is not CUDA, and says so).
use std::{collections::HashMap, path::PathBuf, process::Command, time::Duration};

use inferscope::{
    collect::cuda::GpuMemAccount,
    probes::{Family, Probes},
};
use inferscope_tests::root_or_skip;
use probe_common::cuda::{CUDA_ERROR_OUT_OF_MEMORY, CudaEvent, api};

/// Test double of libcuda's allocation, free, map, launch, copy and sync entry points.
const FAKE_CUDA: &str = r#"
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#define NOINLINE __attribute__((noipa, used, visibility("default")))
typedef uint64_t CUdeviceptr;
typedef struct { unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                 sharedMemBytes; void *hStream; void *attrs; unsigned numAttrs; } CUlaunchConfig;
static const size_t CAPACITY = 1u << 30;
static char host[1 << 16];
NOINLINE int cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
    if (n > CAPACITY) return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
    *p = (CUdeviceptr)(uintptr_t)malloc(n ? n : 1);
    return 0;
}
NOINLINE int cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t n, void *s) {
    (void)s; *p = (CUdeviceptr)(uintptr_t)malloc(n); return 0;
}
NOINLINE int cuMemFree_v2(CUdeviceptr p) { free((void *)(uintptr_t)p); return 0; }
NOINLINE int cuMemFreeAsync_ptsz(CUdeviceptr p, void *s) { (void)s; free((void *)(uintptr_t)p); return 0; }
NOINLINE int cuMemMap(CUdeviceptr p, size_t n, size_t off, uint64_t h, unsigned long long f) {
    (void)p; (void)off; (void)h; (void)f; return n > CAPACITY ? 2 : 0;
}
NOINLINE int cuMemUnmap(CUdeviceptr p, size_t n) { (void)p; (void)n; return 0; }
NOINLINE int cuStreamSynchronize(void *stream) { (void)stream; usleep(2000); return 0; }
/* A short wait, as a synchronize behind a few small kernels is: ~20 us spinning. */
static void spin_us(long us) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do { clock_gettime(CLOCK_MONOTONIC, &b); }
    while ((b.tv_sec - a.tv_sec) * 1000000L + (b.tv_nsec - a.tv_nsec) / 1000 < us);
}
NOINLINE int cuCtxSynchronize_v2(void *ctx) { (void)ctx; spin_us(20); return 0; }
NOINLINE int cuEventSynchronize(void *event) { (void)event; spin_us(20); return 0; }
NOINLINE int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                            unsigned by, unsigned bz, unsigned shm, void *s, void **a, void **e) {
    return 0;
}
NOINLINE int cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, void *f, void **a, void **e) {
    (void)c; (void)f; (void)a; (void)e; return 0;
}
NOINLINE int cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *h, size_t n, void *s) {
    (void)s; memcpy((void *)(uintptr_t)d, h, n); return 0;
}
NOINLINE int cuMemcpyDtoHAsync_v2_ptsz(void *h, CUdeviceptr d, size_t n, void *s) {
    (void)s; memcpy(h, (void *)(uintptr_t)d, n); return 0;
}
/* Each thread allocates a size unique to it: 1000 * (thread + 1) + i. */
static void *worker(void *arg) {
    long t = (long)arg;
    CUdeviceptr ptrs[50];
    for (int i = 0; i < 50; i++) cuMemAlloc_v2(&ptrs[i], 1000 * (t + 1) + i);
    for (int i = 0; i < 50; i++) { cuLaunchKernel(0,4,2,1,1,1,1,0,0,0,0); }
    for (int i = 0; i < 50; i++) cuMemFree_v2(ptrs[i]);
    return 0;
}
int main(void) {
    CUdeviceptr big;
    cuMemAlloc_v2(&big, (size_t)1 << 40); /* OOM */
    pthread_t th[4];
    for (long t = 0; t < 4; t++) pthread_create(&th[t], 0, worker, (void *)t);
    for (int t = 0; t < 4; t++) pthread_join(th[t], 0);
    for (int i = 0; i < 3; i++) cuStreamSynchronize(0);
    /* Triton's launcher: 30 launches of a 16 x 8 x 1 grid through the config struct. */
    CUlaunchConfig c = { 16, 8, 1, 128, 1, 1, 0, 0, 0, 0 };
    for (int i = 0; i < 30; i++) cuLaunchKernelEx_ptsz(&c, 0, 0, 0);
    /* 100 short synchronizes, as torch.cuda.synchronize() behind small kernels: 60 of the
       context (CUDA 13's cudaDeviceSynchronize), 40 on events. */
    for (int i = 0; i < 60; i++) cuCtxSynchronize_v2(0);
    for (int i = 0; i < 40; i++) cuEventSynchronize(0);
    /* Async copies: 10 x 4 KiB in, 5 x 8 KiB out; stream-ordered alloc and free. */
    CUdeviceptr buf;
    cuMemAllocAsync_ptsz(&buf, sizeof host, 0);
    for (int i = 0; i < 10; i++) cuMemcpyHtoDAsync_v2(buf, host, 4096, 0);
    for (int i = 0; i < 5; i++) cuMemcpyDtoHAsync_v2_ptsz(host, buf, 8192, 0);
    cuMemFreeAsync_ptsz(buf, 0);
    /* Expandable segments: 3 x 2 MiB mapped, 1 unmapped. */
    for (int i = 0; i < 3; i++) cuMemMap(0x1000000 * (i + 1), 2u << 20, 0, 0, 0);
    cuMemUnmap(0x1000000, 2u << 20);
    return 0;
}
"#;

fn build_double() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("inferscope-fake-cuda-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("fake_cuda.c");
    let bin = dir.join("fake_cuda");
    std::fs::write(&src, FAKE_CUDA).unwrap();
    let st = Command::new("cc")
        .args(["-O2", "-pthread", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .expect("cc (gcc) is needed");
    assert!(st.success(), "building the CUDA test double failed");
    bin
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uprobes_count_allocs_frees_oom_and_syncs_per_thread() {
    let Some(_machine) = root_or_skip("uprobes_count_allocs_frees_oom_and_syncs_per_thread") else {
        return;
    };
    let bin = build_double();
    let mut probes = Probes::load().unwrap();
    probes.attach(Family::Cuda).unwrap();
    let attached = probes.attach_cuda_target(&bin);
    // Alloc, async alloc (_ptsz) and map with their returns, free, async free (_ptsz), unmap,
    // launch, launch Ex (_ptsz), both copies, and the three syncs with their returns.
    assert_eq!(attached, 19, "hooks: {:?}", probes.hooks());
    let mut reader = probes.cuda_events(65_536).unwrap().unwrap();

    let child = Command::new(&bin).spawn().unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());

    let mut events: Vec<CudaEvent> = Vec::new();
    while let Ok(Some(ev)) =
        tokio::time::timeout(Duration::from_millis(500), reader.rx.recv()).await
    {
        if ev.tgid == pid {
            events.push(ev);
        }
    }
    let allocs: Vec<&CudaEvent> = events.iter().filter(|e| e.api == api::MEM_ALLOC).collect();
    let frees = events.iter().filter(|e| e.api == api::MEM_FREE).count();
    let syncs: Vec<&CudaEvent> = events
        .iter()
        .filter(|e| e.api == api::STREAM_SYNC)
        .collect();
    assert_eq!(allocs.len(), 201, "200 allocations + 1 OOM");
    assert_eq!(frees, 200);
    assert_eq!(syncs.len(), 3);
    assert_short_syncs_and_async_calls(&events);
    assert!(
        syncs.iter().all(|s| s.duration_ns >= 2_000_000),
        "sync time includes the 2 ms wait"
    );
    let oom: Vec<_> = allocs
        .iter()
        .filter(|e| e.ret == CUDA_ERROR_OUT_OF_MEMORY)
        .collect();
    assert_eq!(oom.len(), 1);
    assert_eq!(oom[0].size, 1 << 40);

    // Pending calls are keyed by thread: every thread's sizes come from its own range.
    let mut by_tid: HashMap<u32, Vec<u64>> = HashMap::new();
    for a in allocs.iter().filter(|e| e.ret == 0) {
        assert_ne!(a.ptr, 0, "the return probe read the out-pointer");
        by_tid.entry(a.tid).or_default().push(a.size);
    }
    assert_eq!(by_tid.len(), 4, "four allocating threads");
    for sizes in by_tid.values() {
        let base = sizes[0] / 1000 * 1000;
        let mut sorted = sizes.clone();
        sorted.sort_unstable();
        assert_eq!(
            sorted,
            (0..50).map(|i| base + i).collect::<Vec<_>>(),
            "a thread's sizes got mixed up"
        );
    }

    let mut account = GpuMemAccount::default();
    for e in &events {
        account.apply(e);
    }
    let s = account.get(pid).unwrap();
    let expected: u64 = (0..4u64)
        .flat_map(|t| (0..50).map(move |i| 1000 * (t + 1) + i))
        .sum::<u64>()
        + (1 << 16);
    assert_eq!(s.bytes_allocated, expected);
    assert_eq!(s.live_bytes, 0, "live bytes return to zero after frees");
    assert_eq!((s.allocs, s.frees, s.oom), (201, 201, 1));
    assert_eq!((s.maps, s.unmaps), (3, 1));
    assert_eq!(s.mapped_bytes, 2 * (2 << 20), "two 2 MiB mappings held");
    assert_eq!(s.syncs, 103);
    let c = probes
        .cuda_counts()
        .unwrap()
        .get(&pid)
        .copied()
        .unwrap_or_default();
    assert_eq!(
        (c.kernels, c.kernels_ex),
        (230, 30),
        "200 cuLaunchKernel + 30 Ex"
    );
    assert_eq!(
        c.blocks,
        200 * 8 + 30 * 128,
        "grid sizes from the arguments and the config"
    );
    assert_eq!((c.h2d_bytes, c.d2h_bytes), (10 * 4096, 5 * 8192));
    let d = probes.cuda_drops().unwrap();
    assert_eq!(d.ringbuf_full + d.pending_full + d.counts_full, 0);
    assert_eq!(reader.drops.get(), 0);
}

/// The 100 short synchronizes: each counted, each with its time (the spin's ~20 us), in ns
/// (`CudaEvent::duration_ns`, summed as f64 ms per window: no rounding to whole units); the
/// stream-ordered allocation and its `_ptsz` free.
fn assert_short_syncs_and_async_calls(events: &[CudaEvent]) {
    let short: Vec<&CudaEvent> = events
        .iter()
        .filter(|e| e.api == api::CTX_SYNC || e.api == api::EVENT_SYNC)
        .collect();
    assert_eq!(short.len(), 100, "60 context + 40 event synchronizes");
    assert_eq!(
        short.iter().filter(|e| e.api == api::EVENT_SYNC).count(),
        40
    );
    assert!(
        short.iter().all(|s| s.duration_ns >= 20_000),
        "each short sync carries its ~20 us"
    );
    let short_ns: u64 = short.iter().map(|s| s.duration_ns).sum();
    assert!(
        (2_000_000..200_000_000).contains(&short_ns),
        "{short_ns} ns"
    );
    let async_allocs = events
        .iter()
        .filter(|e| e.api == api::MEM_ALLOC_ASYNC && e.ret == 0)
        .count();
    let async_frees = events
        .iter()
        .filter(|e| e.api == api::MEM_FREE_ASYNC)
        .count();
    assert_eq!((async_allocs, async_frees), (1, 1), "cuMemFreeAsync_ptsz");
}

//! CUDA driver-API uprobes against a test double: a C program built here that exports
//! functions with the driver API's names and signatures (it is not CUDA, and says so).
use std::{collections::HashMap, path::PathBuf, process::Command, time::Duration};

use inferscope::{
    collect::cuda::GpuMemAccount,
    probes::{Family, Probes},
};
use inferscope_tests::root_or_skip;
use probe_common::cuda::{CUDA_ERROR_OUT_OF_MEMORY, CudaEvent, api};

/// Test double of libcuda's allocation, free and sync entry points.
const FAKE_CUDA: &str = r#"
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
#define NOINLINE __attribute__((noipa, used, visibility("default")))
typedef uint64_t CUdeviceptr;
static const size_t CAPACITY = 1u << 30;
NOINLINE int cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
    if (n > CAPACITY) return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
    *p = (CUdeviceptr)(uintptr_t)malloc(n ? n : 1);
    return 0;
}
NOINLINE int cuMemFree_v2(CUdeviceptr p) { free((void *)(uintptr_t)p); return 0; }
NOINLINE int cuStreamSynchronize(void *stream) { (void)stream; usleep(2000); return 0; }
NOINLINE int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                            unsigned by, unsigned bz, unsigned shm, void *s, void **a, void **e) {
    return 0;
}
/* Each thread allocates a size unique to it: 1000 * (thread + 1) + i. */
static void *worker(void *arg) {
    long t = (long)arg;
    CUdeviceptr ptrs[50];
    for (int i = 0; i < 50; i++) cuMemAlloc_v2(&ptrs[i], 1000 * (t + 1) + i);
    for (int i = 0; i < 50; i++) { cuLaunchKernel(0,1,1,1,1,1,1,0,0,0,0); }
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
    assert_eq!(attached, 6, "hooks: {:?}", probes.hooks());
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
        .sum();
    assert_eq!(s.bytes_allocated, expected);
    assert_eq!(s.live_bytes, 0, "live bytes return to zero after frees");
    assert_eq!((s.allocs, s.frees, s.oom), (200, 200, 1));
    assert_eq!(
        probes.cuda_launches().unwrap().get(&pid).map(|l| l.kernels),
        Some(200)
    );
    let d = probes.cuda_drops().unwrap();
    assert_eq!(d.ringbuf_full + d.pending_full + d.launches_full, 0);
    assert_eq!(reader.drops.get(), 0);
}

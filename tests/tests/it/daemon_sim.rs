//! The daemon's collectors against `inferscope sim` (in this process): the simulated device's
//! allocations (uprobes on this test binary's exported driver-API symbols), the engine's
//! run-queue delay and the scraped KV usage land on one time line.
use std::time::Duration;

use inferscope::{
    collect::{
        kernel::{KernelCollector, KernelOptions},
        server::ServerCollector,
        timeline::{Part, Timeline},
    },
    sim,
};
use inferscope_tests::root_or_skip;
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpStream,
};

async fn stream_chat(addr: std::net::SocketAddr) {
    let body = r#"{"model":"inferscope-sim","messages":[{"role":"user","content":"tell me a long story about kernels"}],"max_tokens":64,"stream":true}"#;
    let req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out);
    assert!(text.contains("[DONE]"), "{}", &text[..text.len().min(600)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_allocations_runqueue_and_kv_usage_on_one_time_line() {
    let Some(_machine) = root_or_skip("sim_allocations_runqueue_and_kv_usage_on_one_time_line")
    else {
        return;
    };
    let me = std::process::id();
    // Attach before the sim starts, so its KV-pool allocation is seen.
    let mut kernel = KernelCollector::start(KernelOptions {
        servers: vec![me],
        loadgen: None,
        cuda_targets: vec![std::env::current_exe().unwrap()],
        discover_libcuda: false,
    })
    .unwrap();
    assert!(
        kernel
            .hooks()
            .iter()
            .any(|h| h.probe.starts_with("cuMemAlloc_v2@") && h.is_attached()),
        "{:?}",
        kernel.hooks()
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = sim::start(sim::profile("kv-pressure").unwrap(), listener)
        .await
        .unwrap();
    let mut scraper = ServerCollector::start(
        &server.url(),
        Duration::from_millis(250),
        &inferscope::tls::TlsOptions::default(),
    )
    .unwrap();

    let mut timeline = Timeline::new(inferscope::clock::unix_ms(), 1000);
    for _ in 0..3 {
        let streams: Vec<_> = (0..64)
            .map(|_| tokio::spawn(stream_chat(server.addr())))
            .collect();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let w = timeline.at(inferscope::clock::unix_ms().saturating_sub(1));
        kernel
            .close_windows(&mut [Part {
                pids: &[me],
                window: &mut *w,
            }])
            .unwrap();
        scraper.close_window(w);
        for s in streams {
            s.await.unwrap();
        }
    }
    let windows = &timeline.windows;
    let allocs: u64 = windows
        .iter()
        .filter_map(|w| w.gpu.as_ref())
        .map(|g| g.allocs)
        .sum();
    let launches: u64 = windows
        .iter()
        .filter_map(|w| w.gpu.as_ref())
        .map(|g| g.launches)
        .sum();
    let sync_ms: f64 = windows
        .iter()
        .filter_map(|w| w.gpu.as_ref())
        .map(|g| g.sync_ms)
        .sum();
    let runq: u64 = windows
        .iter()
        .filter_map(|w| w.runq.as_ref())
        .map(|r| r.samples)
        .sum();
    let kv = windows
        .iter()
        .filter_map(|w| w.server.as_ref()?.kv_usage)
        .fold(0.0, f64::max);
    println!(
        "allocs {allocs} launches {launches} sync {sync_ms:.1} ms runq samples {runq} kv max {kv}"
    );
    assert!(allocs > 0, "the sim's device allocations are seen");
    assert!(
        launches > 0 && sync_ms > 0.0,
        "engine steps launch and synchronise"
    );
    assert!(runq > 0, "the engine's run-queue delay is measured");
    assert!(
        kv > 0.5,
        "scraped KV usage of the kv-pressure profile: {kv}"
    );
    let live = kernel.gpu_account().get(me).map_or(0, |s| s.live_bytes);
    assert!(live > 0, "the KV pool is live device memory");
    let _ = server.shutdown().await;
}

//! The daemon's collectors against `inferscope sim` (in this process): the simulated device's
//! allocations (uprobes on this test binary's exported driver-API symbols), the engine's
//! run-queue delay and the scraped KV usage land on one time line; and the whole daemon started
//! in process serves `/metrics`.
use std::time::Duration;

use inferscope::{
    api::Bind,
    collect::{
        kernel::{KernelCollector, KernelOptions},
        server::ServerCollector,
        timeline::{Part, Timeline},
    },
    daemon::{Daemon, DaemonOptions, Finder},
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

/// The daemon assembled in this process, as `inferscope daemon` assembles it: watching this
/// process (the sim runs in it), on free ports, `/metrics` carries the sim's scraped signals
/// and the daemon stops cleanly when told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_started_in_process_serves_metrics_and_stops() {
    let Some(_machine) = root_or_skip("a_daemon_started_in_process_serves_metrics_and_stops")
    else {
        return;
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = sim::start(sim::profile("healthy").unwrap(), listener)
        .await
        .unwrap();
    let any_port = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let daemon = Daemon::start(DaemonOptions {
        finder: Finder {
            pids: vec![std::process::id()],
            ..Finder::default()
        },
        metrics_url: Some(format!("{}/metrics", server.url())),
        metrics_listen: any_port,
        api_listen: Bind::Tcp(any_port),
        ..DaemonOptions::default()
    })
    .await
    .unwrap_or_else(|e| panic!("the daemon did not start: {e}"));
    let at = daemon.metrics_addr();
    assert_ne!(at.port(), 0, "the bound port is known");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(daemon.run(async {
        let _ = stopped.await;
    }));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let metrics = loop {
        stream_chat(server.addr()).await;
        let m = tokio::task::spawn_blocking(move || inferscope_tests::http_get(at, "/metrics"))
            .await
            .unwrap()
            .unwrap_or_default();
        if m.contains("inferscope_server_running_requests") {
            break m;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no scraped server signal on the in-process daemon's /metrics:\n{m}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert!(metrics.contains("inferscope_window"), "{metrics}");
    stop.send(()).unwrap();
    let stopped = tokio::time::timeout(Duration::from_secs(20), running)
        .await
        .expect("the daemon stops within 20 s")
        .unwrap()
        .unwrap();
    assert_eq!(stopped.servers, 1, "{stopped:?}");
}

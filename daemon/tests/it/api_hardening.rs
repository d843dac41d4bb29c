//! The control API against hostile input: posted scenarios read files only from the daemon's
//! data folder, and the shared HTTP server loop cuts off slow clients and caps connections.
//! Loopback only; no root needed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::{Router, routing::get};
use inferscope::api::{
    Api, ApiConfig, LoadgenLauncher, Marks,
    serve::{Limits, serve},
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// Sends `raw` and reads until the peer closes or `wait` passes; returns what came back.
async fn exchange(addr: std::net::SocketAddr, raw: &str, wait: Duration) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(raw.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(wait, s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

fn post(path: &str, body: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

async fn api(data_dir: Option<std::path::PathBuf>) -> std::net::SocketAddr {
    let config = ApiConfig {
        bind: "127.0.0.1:0".parse().unwrap(),
        ..ApiConfig::default()
    };
    let launcher = Arc::new(LoadgenLauncher::new(
        inferscope::dial::Reach::Loopback,
        data_dir,
    ));
    let api = Api::bind(&config, launcher, Marks::default())
        .await
        .unwrap();
    let addr = api.local_addr().unwrap();
    tokio::spawn(api.serve(std::future::pending()));
    addr
}

fn scenario(dataset: &str) -> String {
    format!(
        "target: http://127.0.0.1:9\nphases:\n  - name: a\n    duration: 1s\n    load: {{shape: constant, rate: 1}}\n    request: {{endpoint: chat, dataset: d}}\ndatasets:\n  d: {dataset}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn posted_scenarios_read_files_only_from_the_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("p.jsonl"), "{\"prompt\":\"hello\"}\n").unwrap();
    std::fs::write(dir.path().join("outside.jsonl"), "{\"prompt\":\"x\"}\n").unwrap();
    let confined = api(Some(data.clone())).await;
    let open = exchange(
        confined,
        &post("/api/v1/runs", &scenario("{path: p.jsonl}")),
        Duration::from_secs(5),
    )
    .await;
    assert!(open.starts_with("HTTP/1.1 201"), "{open}");
    // Let that run end before the next POST (one run at a time).
    tokio::time::sleep(Duration::from_millis(2500)).await;
    for (path, says) in [
        ("/etc/passwd", "leading `/`"),
        ("../outside.jsonl", "without `..`"),
        ("/dev/zero", "leading `/`"),
        ("missing.jsonl", "in --data-dir"),
    ] {
        let ans = exchange(
            confined,
            &post("/api/v1/runs", &scenario(&format!("{{path: \"{path}\"}}"))),
            Duration::from_secs(5),
        )
        .await;
        assert!(ans.starts_with("HTTP/1.1 400"), "{path}: {ans}");
        assert!(ans.contains(says), "{path}: {ans}");
    }

    let none = api(None).await;
    let ans = exchange(
        none,
        &post("/api/v1/runs", &scenario("{path: p.jsonl}")),
        Duration::from_secs(5),
    )
    .await;
    assert!(ans.starts_with("HTTP/1.1 400"), "{ans}");
    assert!(ans.contains("start the daemon with --data-dir"), "{ans}");
    let inline = exchange(
        none,
        &post("/api/v1/runs", &scenario("{prompts: [\"hi there\"]}")),
        Duration::from_secs(5),
    )
    .await;
    assert!(inline.starts_with("HTTP/1.1 201"), "{inline}");
}

async fn limited(limits: Limits) -> std::net::SocketAddr {
    let router = Router::new().route("/", get(|| async { "ok" })).route(
        "/slow",
        get(|| async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            "late"
        }),
    );
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(serve(l, router, limits, std::future::pending()));
    addr
}

const GET: &str = "GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n";

#[tokio::test]
async fn slow_headers_are_cut_off_and_slow_requests_answered_408() {
    let addr = limited(Limits {
        header_read: Duration::from_millis(300),
        request: Duration::from_millis(300),
        ..Limits::default()
    })
    .await;
    // Half a request line, then silence: closed after the header deadline, nothing served.
    let t = Instant::now();
    let ans = exchange(addr, "GET / HTT", Duration::from_secs(10)).await;
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "held {:?}",
        t.elapsed()
    );
    assert!(!ans.contains("200 OK"), "{ans}");
    let ans = exchange(
        addr,
        "GET /slow HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        Duration::from_secs(10),
    )
    .await;
    assert!(ans.starts_with("HTTP/1.1 408"), "{ans}");
    assert!(ans.contains("send the whole request promptly"), "{ans}");
    // The server still serves.
    let ok = exchange(addr, GET, Duration::from_secs(5)).await;
    assert!(ok.starts_with("HTTP/1.1 200") && ok.ends_with("ok"), "{ok}");
}

#[tokio::test]
async fn connections_beyond_the_cap_wait_for_a_free_slot() {
    let addr = limited(Limits {
        connections: 1,
        header_read: Duration::from_secs(20),
        ..Limits::default()
    })
    .await;
    // The only slot, held by a client that says nothing.
    let holder = TcpStream::connect(addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut waiting = TcpStream::connect(addr).await.unwrap();
    waiting.write_all(GET.as_bytes()).await.unwrap();
    let mut buf = [0u8; 64];
    let early = tokio::time::timeout(Duration::from_millis(700), waiting.read(&mut buf)).await;
    assert!(early.is_err(), "served beyond the cap: {early:?}");
    drop(holder);
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), waiting.read_to_end(&mut out))
        .await
        .expect("not served after the slot was freed")
        .unwrap();
    assert!(String::from_utf8_lossy(&out).starts_with("HTTP/1.1 200"));
}

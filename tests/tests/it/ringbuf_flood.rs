//! A ring buffer that overflows is counted, never silent, and the daemon survives it: the
//! daemon is stopped (SIGSTOP, so nothing drains its socket ring buffer) while this test opens
//! and closes thousands of TCP connections (every connection on the node is an event: connect,
//! accept, close), then continued; `/metrics` must show `inferscope_dropped_total` for the
//! kernel's socket events above zero, counted against the hook that lost them
//! (`hook="sock:inet_sock_set_state"`), and the daemon must keep serving and exit cleanly.
//! Needs root (eBPF) and `cargo build -p inferscope`.
use std::{
    net::{SocketAddr, TcpListener, TcpStream},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use inferscope_tests::{free_port, http_get, inferscope_bin, root_or_skip};

/// The sockets family's drops, summed over its hooks and reasons (one series each).
fn kernel_socket_drops(metrics: &str) -> Option<f64> {
    hook_drops(metrics, "")
}

/// The sockets family's drops counted against hooks whose label contains `hook`; `None` when
/// no such series is exported.
fn hook_drops(metrics: &str, hook: &str) -> Option<f64> {
    let values: Vec<f64> = metrics
        .lines()
        .filter(|l| {
            l.starts_with("inferscope_dropped_total{")
                && l.contains("stage=\"kernel\"")
                && l.contains("what=\"sockets\"")
                && l.contains(&format!("hook=\"{hook}"))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

#[test]
fn a_flooded_ring_buffer_is_counted_and_the_daemon_keeps_running() {
    let Some(_machine) =
        root_or_skip("a_flooded_ring_buffer_is_counted_and_the_daemon_keeps_running")
    else {
        return;
    };
    let metrics: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let api: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let mut daemon = Command::new(inferscope_bin())
        .args(["daemon", "--pid", &std::process::id().to_string()])
        .args(["--metrics-listen", &metrics.to_string()])
        .args(["--api-listen", &api.to_string()])
        .args(["--interval", "500ms"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_mins(1);
    while kernel_socket_drops(&http_get(metrics, "/metrics").unwrap_or_default()).is_none() {
        assert!(
            daemon.try_wait().unwrap().is_none(),
            "the daemon exited at start"
        );
        assert!(
            Instant::now() < deadline,
            "no drop counters on /metrics within 60 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let text = http_get(metrics, "/metrics").unwrap_or_default();
    let before = kernel_socket_drops(&text).unwrap_or(0.0);
    // Counted per hook: the connection-state tracepoint emits the connect/accept/close events.
    let state = "sock:inet_sock_set_state";
    let state_before = hook_drops(&text, state).expect("a drop series of the state hook");

    let pid = daemon.id().to_string();
    inferscope_tests::sh(&["kill", "-STOP", &pid]);
    // 1 MiB of ~220-byte events holds under 5,000; 8,000 connections make over 24,000.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = std::thread::spawn(move || {
        for _ in 0..8_000 {
            if listener.accept().is_err() {
                break;
            }
        }
    });
    for _ in 0..8_000 {
        drop(TcpStream::connect(addr).unwrap());
    }
    acceptor.join().unwrap();
    inferscope_tests::sh(&["kill", "-CONT", &pid]);

    let deadline = Instant::now() + Duration::from_secs(20);
    let after = loop {
        let text = http_get(metrics, "/metrics").unwrap_or_default();
        if let Some(n) = kernel_socket_drops(&text).filter(|n| *n > before) {
            break n;
        }
        assert!(
            Instant::now() < deadline,
            "socket drops did not rise above {before} within 20 s:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    println!("kernel socket events dropped: {before} -> {after}");
    let text = http_get(metrics, "/metrics").unwrap_or_default();
    let state_after = hook_drops(&text, state).unwrap_or(0.0);
    assert!(
        state_after > state_before,
        "the state hook's drops stayed at {state_before}:\n{text}"
    );
    assert!(daemon.try_wait().unwrap().is_none(), "the daemon died");
    inferscope_tests::sh(&["kill", "-TERM", &pid]);
    let status = daemon.wait().unwrap();
    assert!(status.success(), "daemon exit after SIGTERM: {status}");
}

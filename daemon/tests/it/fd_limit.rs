//! The open-file limit: `inferscope` raises its soft `RLIMIT_NOFILE` to the hard limit at
//! start, and when descriptors still run out, the failures are the client's own error class
//! (`client_fd_limit`), not the server's `connect`.

use crate::hung_support;
use hung_support::hung_server;

use std::process::Command;

/// Runs 150 requests that all stay open under `ulimit` flags `limit`; the report's errors.
fn errors_under(limit: &str) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    let cmd = format!(
        "ulimit {limit} && exec {} stress --target {} --endpoint http --rate 300 --duration 500ms --timeout 1s --quiet --out {}",
        env!("CARGO_BIN_EXE_inferscope"),
        hung_server().0,
        out.display()
    );
    let o = Command::new("sh").args(["-c", &cmd]).output().unwrap();
    assert!(out.exists(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    r["phases"][0]["counts"]["errors"].clone()
}

#[test]
fn descriptors_running_out_is_the_clients_error_and_the_soft_limit_is_raised() {
    // Hard limit 64: nothing to raise to, so most of the 150 connections fail with EMFILE.
    let e = errors_under("-n 64");
    let fd = e["client_fd_limit"].as_u64().unwrap_or(0);
    assert!(fd >= 50, "{e}");
    assert_eq!(e["connect"].as_u64().unwrap_or(0), 0, "{e}");
    // Soft limit 64 under a higher hard limit: raised at start, no descriptor errors.
    let hard: u64 = String::from_utf8(
        Command::new("sh")
            .args(["-c", "ulimit -Hn"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .parse()
    .unwrap_or(0);
    if hard < 1024 {
        println!("skipping the raise half: the hard limit here is {hard}");
        return;
    }
    let e = errors_under("-Sn 64");
    assert_eq!(e["client_fd_limit"].as_u64().unwrap_or(0), 0, "{e}");
}

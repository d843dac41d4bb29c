//! `inferscope stress` and signals: SIGTERM (Kubernetes Jobs, `timeout`) and SIGINT stop
//! sending, give requests in flight `grace`, write the report and exit 143 / 130; a second
//! signal exits at once; an unwritable `--out` is refused before any request is sent; a knee
//! search ends as `interrupted` with the steps it ran.

use crate::hung_support;
use hung_support::hung_server;

use std::{
    process::{Child, Stdio},
    sync::atomic::{AtomicUsize, Ordering},
    time::{Duration, Instant},
};

fn stress(dir: &std::path::Path, target: &str, grace: &str, out: &std::path::Path) -> Child {
    let scenario = dir.join("s.yaml");
    std::fs::write(
        &scenario,
        format!(
            "target: {target}\ntimeout: 60s\ngrace: {grace}\nphases:\n  - name: p\n    duration: 60s\n    load: {{shape: constant, rate: 10}}\n    request: {{endpoint: http, path: /x}}\n"
        ),
    )
    .unwrap();
    crate::cli::inferscope()
        .arg("stress")
        .arg(&scenario)
        .arg("--quiet")
        .arg("--out")
        .arg(out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn kill(c: &Child, sig: i32) {
    // SAFETY: kill(2) on our own child's pid.
    let rc = unsafe { libc::kill(i32::try_from(c.id()).unwrap(), sig) };
    assert_eq!(rc, 0);
}

fn wait_for(seen: &AtomicUsize) {
    let t = Instant::now();
    while seen.load(Ordering::Relaxed) == 0 {
        assert!(t.elapsed() < Duration::from_secs(20), "no request arrived");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigterm_writes_the_report_after_grace_and_exits_143() {
    let dir = tempfile::tempdir().unwrap();
    let (url, seen) = hung_server();
    let out = dir.path().join("r.json");
    let child = stress(dir.path(), &url, "1s", &out);
    wait_for(&seen);
    let t = Instant::now();
    kill(&child, libc::SIGTERM);
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(143), "{err}");
    // Grace was given (1 s), and not much more.
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(900), "{took:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert!(
        r["stopped"].as_str().unwrap().contains("interrupted"),
        "{r}"
    );
    let aborted = r["phases"][0]["counts"]["errors"]["aborted"]
        .as_u64()
        .unwrap_or(0);
    assert!(
        aborted >= 1,
        "the hung requests are counted as aborted: {r}"
    );
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().collect();
    assert_eq!(left.len(), 2, "only s.yaml and r.json: {left:?}");
}

#[test]
fn a_second_signal_exits_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (url, seen) = hung_server();
    let out = dir.path().join("r.json");
    let child = stress(dir.path(), &url, "60s", &out);
    wait_for(&seen);
    let t = Instant::now();
    kill(&child, libc::SIGINT);
    std::thread::sleep(Duration::from_millis(300));
    kill(&child, libc::SIGTERM);
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130), "the first signal's code");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert!(!out.exists());
}

#[test]
fn an_unwritable_out_is_refused_before_sending() {
    let dir = tempfile::tempdir().unwrap();
    let (url, seen) = hung_server();
    let out = std::path::Path::new("/proc/self/nope/r.json");
    let o = stress(dir.path(), &url, "1s", out)
        .wait_with_output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--out /proc/self/nope/r.json cannot be written"),
        "{err}"
    );
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(seen.load(Ordering::Relaxed), 0);
}

#[test]
fn sigterm_during_a_knee_search_ends_it_as_interrupted_with_its_table() {
    let dir = tempfile::tempdir().unwrap();
    let (url, seen) = hung_server();
    let out = dir.path().join("knee.json");
    let child = crate::cli::inferscope()
        .args([
            "stress",
            "--target",
            &url,
            "--endpoint",
            "http",
            "--timeout",
            "60s",
        ])
        .args([
            "--find-max",
            "e2e_p99 < 500ms",
            "--step-duration",
            "30s",
            "--quiet",
        ])
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&seen);
    kill(&child, libc::SIGTERM);
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(143), "{err}");
    let search: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(search["stopped"], "interrupted", "{search}");
    assert!(search["max_pass"].is_null(), "{search}");
}

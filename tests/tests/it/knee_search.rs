//! `stress --find-max` finds the load where the SLO breaks, on a server whose capacity is
//! known: the Python server without metrics admits 2 requests at a time and spends 16 tokens x
//! 4 ms on each, so with evenly spaced arrivals nothing waits below `2 / service time`
//! requests/s and the queue (and TTFT) grows without bound above it. The truth is that
//! capacity, from the time a request holds its slot measured at a low load in the same test:
//! from its first token's sleep to its last token (E2E - TTFT + one token gap; the client's
//! connect and the request's transfer happen before the slot is taken).

use std::{path::Path, process::Command};

use inferscope_tests::{
    explain::loopback,
    faults::{NoMetricsServer, Writes},
    inferscope_bin, machine,
};
use serde_json::Value;

fn stress(target: &str, extra: &[&str], out: &Path) -> (std::process::Output, Value) {
    let o = Command::new(inferscope_bin())
        .args(["stress", "--target", target, "--model", "nometrics"])
        .args(["--max-tokens", "16", "--quiet", "--no-records", "--out"])
        .arg(out)
        .args(extra)
        .output()
        .expect("run inferscope stress");
    let text = std::fs::read_to_string(out).unwrap_or_else(|e| {
        panic!(
            "{} not written ({e}): {}",
            out.display(),
            String::from_utf8_lossy(&o.stderr)
        )
    });
    let v = serde_json::from_str(&text).expect("JSON");
    (o, v)
}

#[test]
fn find_max_lands_within_ten_percent_of_the_capacity() {
    let _machine = machine();
    let server = NoMetricsServer::start(&[], loopback(), 2, 4.0, Writes::NoDelay);
    let dir = tempfile::tempdir().unwrap();
    let target = server.url();

    // The truth: service time at 2 req/s (no request waits for a slot).
    let (o, low) = stress(
        &target,
        &["--rate", "2", "--duration", "5s"],
        &dir.path().join("low.json"),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let ms = |k: &str| low["phases"][0]["latency_ms"][k]["p50"].as_f64().unwrap();
    let service_ms = ms("e2e") - ms("ttft") + ms("itl");
    let capacity = 2.0 * 1000.0 / service_ms;

    let (o, search) = stress(
        &target,
        &[
            "--find-max",
            "ttft_p95 < 250ms",
            "--rate",
            &format!("{:.1}", capacity / 3.0),
            "--step-duration",
            "5s",
        ],
        &dir.path().join("knee.json"),
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(stdout.contains("max load meeting the SLOs"), "{stdout}");
    let knee = search["max_pass"].as_f64().expect("a passing load");
    eprintln!("knee {knee} req/s, capacity {capacity:.1} req/s (slot held {service_ms:.1} ms)");
    let fail = search["min_fail"].as_f64().expect("a failing load");
    assert!(
        (knee - capacity).abs() <= 0.1 * capacity,
        "knee {knee} req/s, capacity {capacity:.1} req/s (service {service_ms:.1} ms):\n{stdout}"
    );
    assert!(fail <= knee * 1.06, "{knee} {fail}\n{stdout}");
    assert_eq!(search["stopped"], "converged", "{stdout}");
    // Every step is in the table, in load order, and the failing ones say why.
    let steps = search["steps"].as_array().unwrap();
    assert!(steps.len() >= 4, "{stdout}");
    assert!(
        steps
            .iter()
            .filter(|s| s["pass"] == false)
            .all(|s| !s["why"].as_array().unwrap().is_empty())
    );
}

#[test]
fn find_max_refuses_what_it_cannot_search() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.json");
    for (extra, want) in [
        (
            &["--find-max", "ttft_p95 < 1s", "--duration", "5s"][..],
            "--step-duration",
        ),
        (&["--find-max", "ttft_p95 <"][..], "bad SLO"),
        (
            &[
                "--find-max",
                "ttft_p95 < 1s",
                "--rate",
                "50",
                "--max-load",
                "10",
            ][..],
            "start",
        ),
    ] {
        let o = Command::new(inferscope_bin())
            .args(["stress", "--target", "http://127.0.0.1:9", "--out"])
            .arg(&out)
            .args(extra)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{extra:?}: {err}");
        assert!(err.contains(want), "{extra:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{extra:?}: {err}");
    }
}

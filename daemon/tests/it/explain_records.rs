//! The explanation of a run does not depend on the records the load generator keeps: with
//! `--no-records`, `stress --explain` and `stress --html` fold every request into their
//! windows as it finishes, and say in the terminal, report.json and the page what is left out
//! (the waterfalls).

use std::path::Path;

use serde_json::Value;

use crate::sim_process::SimProcess;

/// `requests` of every window's load, summed.
fn window_requests(report: &Value) -> u64 {
    report["timeline"]["windows"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w["load"]["requests"].as_u64())
        .sum()
}

fn finished(phases: &Value) -> u64 {
    phases
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["counts"]["finished"].as_u64().unwrap())
        .sum()
}

const NO_WATERFALLS: &str = "no waterfalls: no per-request records were kept (--no-records)";

/// `stress --no-records` of 20 req/s for `secs` against a fresh sim, with `extra` flags and
/// `path` after them; its stdout and its `--out` report.
fn stress_without_records(secs: u32, extra: &[&str], path: &Path) -> (String, Value) {
    let sim = SimProcess::start(["--corpus-size", "50", "--ttft-ms", "5", "--itl-ms", "2"]);
    let out = path.with_extension("stress.json");
    let run = crate::cli::inferscope()
        .args(["stress", "--target", &sim.url, "--rate", "20"])
        .args(["--duration", &format!("{secs}s"), "--max-tokens", "8"])
        .args(["--quiet", "--no-records"])
        .args(extra)
        .arg(path)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let stress: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert!(stress["records"].as_array().unwrap().is_empty());
    (String::from_utf8_lossy(&run.stdout).into_owned(), stress)
}

#[test]
fn explain_without_records_still_windows_every_request_and_says_what_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    let explained = dir.path().join("explained");
    let (stdout, stress) = stress_without_records(3, &["--explain", "--report-dir"], &explained);
    let sent = finished(&stress["phases"]);
    assert!(sent >= 40, "{sent} requests");
    let report: Value =
        serde_json::from_slice(&std::fs::read(explained.join("report.json")).unwrap()).unwrap();
    assert_eq!(
        window_requests(&report),
        sent,
        "every request is in a window"
    );
    let windows = report["timeline"]["windows"].as_array().unwrap();
    assert!(
        windows
            .iter()
            .any(|w| w["load"]["ttft_ms"]["p99"].as_f64() > Some(0.0)),
        "the windows have latency quantiles"
    );
    let missing: Vec<&str> = report["missing_evidence"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        missing.iter().any(|m| m.starts_with(NO_WATERFALLS)),
        "{missing:?}"
    );
    assert!(stdout.contains(NO_WATERFALLS), "terminal: {stdout}");
    let html = std::fs::read_to_string(explained.join("report.html")).unwrap();
    assert!(html.contains(NO_WATERFALLS), "the page carries the note");
}

#[test]
fn a_load_only_page_without_records_has_its_windows() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("page.html");
    let (_, stress) = stress_without_records(2, &["--html"], &page);
    let sent = finished(&stress["phases"]);
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains(NO_WATERFALLS));
    // The page embeds its report as JSON: its windows hold every request.
    let tag = "id=\"report-data\">";
    let data = &html[html.find(tag).expect("the embedded report") + tag.len()..];
    let report: Value = serde_json::from_str(&data[..data.find("</script>").unwrap()]).unwrap();
    assert_eq!(window_requests(&report), sent);
}

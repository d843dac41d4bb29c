//! `stress --html PATH` without `--explain`: a run of vector-search and plain-HTTP phases
//! against `inferscope sim` writes a page that charts their end-to-end latency over time, and
//! draws without script errors in headless Chromium.

use crate::report_html::{assert_no_errors, data_points, dump_dom};
use crate::sim_process::SimProcess;

const SCENARIO: &str = "\
name: no-tokens
target: TARGET
phases:
  - name: search
    duration: 2s
    load: {shape: constant, rate: 10}
    request: {endpoint: vector_search}
  - name: health
    duration: 2s
    load: {shape: constant, rate: 10}
    request: {endpoint: http, method: GET, path: /v1/models}
";

#[test]
fn stress_html_charts_vector_and_http_latency() {
    let sim = SimProcess::start(["--corpus-size", "200", "--ttft-ms", "5", "--itl-ms", "2"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("s.yaml");
    std::fs::write(&file, SCENARIO.replace("TARGET", &sim.url)).unwrap();
    let page = dir.path().join("page.html");
    let out = crate::cli::inferscope()
        .arg("stress")
        .arg(&file)
        .args(["--quiet", "--html"])
        .arg(&page)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("HTML report written to"), "{err}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("load only (stress without --explain)"));
    // The header says what the run ran on (no LLM phase: no engine asked).
    let head = html.split("id=\"run-provenance\">").nth(1).unwrap();
    let head = &head[..head.find("</div>").unwrap()];
    assert!(
        head.contains(" CPUs") && head.contains(" · Linux "),
        "{head}"
    );
    assert!(!head.contains("inferscope-sim"), "{head}");
    let (dom, stderr) = dump_dom(&html, "stress-html");
    assert_no_errors(&dom, &stderr);
    // About 2 windows per phase, each with a p50 and a p99 of its endpoint.
    let e2e = data_points(&dom, "chart-e2e");
    assert!(e2e >= 6, "{e2e} points");
    assert!(dom.contains("vector search E2E p99"), "legend");
    assert!(dom.contains("HTTP E2E p99"), "legend");
    assert!(data_points(&dom, "chart-waterfall") > 0);
    // No LLM phase: no TTFT; no collectors: the other charts say why they are empty.
    assert_eq!(data_points(&dom, "chart-kv"), 0);
    assert!(dom.contains("data-phase=\"search\""), "phase table");
}

#[test]
fn html_flag_mistakes_are_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("p.html");
    let page = page.to_str().unwrap();
    for (extra, says) in [
        (vec!["--explain"], "drop --html"),
        (
            vec!["--find-max", "ttft_p95 < 1s"],
            "does not apply to --find-max",
        ),
    ] {
        let out = crate::cli::inferscope()
            .args(["stress", "--target", "http://127.0.0.1:1", "--rate", "1"])
            .args(["--duration", "1s", "--html", page])
            .args(&extra)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{extra:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains(says), "{err}");
    }
}

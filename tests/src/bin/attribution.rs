//! `cargo xtask bench attribution`: every case of `inferscope_tests::cases` (each bottleneck by
//! a different mechanism, healthy runs at several loads), run one after another with `stress
//! --explain`, printed as expected vs verdict with share and confidence, and the accuracy.
//! A healthy case is right only when every phase is `none`. Each case's report.json is kept in
//! `target/bench-attribution/CASE.json`. Needs root. Arguments: case names to run (all when
//! none).
use std::process::ExitCode;

use inferscope_tests::{cases, root_or_skip};
use serde_json::Value;

fn main() -> ExitCode {
    let Some(_machine) = root_or_skip("bench attribution") else {
        return ExitCode::SUCCESS;
    };
    let only: Vec<String> = std::env::args().skip(1).collect();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench-attribution");
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("bench attribution: {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    let mut rows = Vec::new();
    for case in cases::all() {
        if !only.is_empty() && !only.iter().any(|n| n == case.name) {
            continue;
        }
        eprintln!("bench attribution: {} ({})", case.name, case.mechanism);
        let report = (case.run)();
        let path = dir.join(format!("{}.json", case.name));
        if let Err(e) = std::fs::write(&path, report.to_string()) {
            eprintln!("bench attribution: {}: {e}", path.display());
        }
        rows.push(row(&case, &report));
    }
    let right = rows.iter().filter(|r| r.ok).count();
    println!(
        "\n{:<22} {:<13} {:<13} {:>6} {:>5}  {:<4} mechanism; other phases",
        "case", "expected", "peak verdict", "share", "conf", "ok"
    );
    for r in &rows {
        println!(
            "{:<22} {:<13} {:<13} {:>5.0}% {:>5.2}  {:<4} {}; {}",
            r.name,
            r.expected,
            r.got,
            r.share * 100.0,
            r.confidence,
            if r.ok { "yes" } else { "NO" },
            r.mechanism,
            r.others
        );
    }
    println!(
        "\naccuracy: {right} of {} cases ({:.0}%)",
        rows.len(),
        100.0 * right as f64 / rows.len().max(1) as f64
    );
    if right == rows.len() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

struct Row {
    name: &'static str,
    mechanism: &'static str,
    expected: &'static str,
    got: String,
    share: f64,
    confidence: f64,
    others: String,
    ok: bool,
}

fn row(case: &cases::Case, report: &Value) -> Row {
    let phases = report["phases"].as_array().cloned().unwrap_or_default();
    let peak = phases.iter().find(|p| p["name"] == "peak");
    let got = peak
        .and_then(|p| p["dominant"].as_str())
        .unwrap_or("?")
        .to_owned();
    let share = peak
        .and_then(|p| p["shares"].as_array())
        .and_then(|s| s.iter().find(|s| s["cause"] == got.as_str()))
        .and_then(|s| s["share"].as_f64())
        .unwrap_or(0.0);
    let others: Vec<String> = phases
        .iter()
        .filter(|p| p["name"] != "peak")
        .map(|p| {
            format!(
                "{} {}",
                p["name"].as_str().unwrap_or("?"),
                p["dominant"].as_str().unwrap_or("?")
            )
        })
        .collect();
    // Healthy: every phase `none`. Otherwise the peak's verdict, and a quiet baseline.
    let ok = if case.expected == "none" {
        phases.iter().all(|p| p["dominant"] == "none")
    } else {
        got == case.expected
            && phases
                .iter()
                .filter(|p| p["name"] == "baseline")
                .all(|p| p["dominant"] == "none")
    };
    Row {
        name: case.name,
        mechanism: case.mechanism,
        expected: case.expected,
        confidence: peak.and_then(|p| p["confidence"].as_f64()).unwrap_or(0.0),
        got,
        share,
        others: others.join(", "),
        ok,
    }
}

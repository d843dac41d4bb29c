//! `cargo xtask bench attribution`: every case of `inferscope_tests::cases` (each bottleneck by
//! a different mechanism, healthy runs at several loads), each fault of
//! `inferscope_tests::sweeps` at several strengths and two faults at once, run one after
//! another with `stress --explain`. Prints expected vs verdict with share and score, the
//! sensitivity of each sweep (the weakest strength found, windows from onset to the first
//! right verdict), the confusion matrix and precision and recall per cause; when every case
//! ran, the tables replace the bench's part of `docs/explain.md`. A healthy case is right
//! only when every phase is `none`; so is a sweep's step too weak to raise the client's
//! latency (`scorecard::latency_rose`). Each case's report.json is kept in
//! `target/bench-attribution/CASE.json`. Needs root. Arguments: case names to run (all when
//! none; `sweeps` for the sweeps and the double fault); `--rescore` judges the kept reports
//! again instead of running the cases.
use std::process::ExitCode;

use inferscope_tests::{cases, root_or_skip, scorecard, sweeps};

fn main() -> ExitCode {
    let Some(_machine) = root_or_skip("bench attribution") else {
        return ExitCode::SUCCESS;
    };
    let mut only: Vec<String> = std::env::args().skip(1).collect();
    let rescore = only.iter().any(|a| a == "--rescore");
    only.retain(|a| a != "--rescore");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = root.join("target/bench-attribution");
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("bench attribution: {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    let sweeps = sweeps::all();
    let swept: Vec<&str> = sweeps
        .iter()
        .flat_map(|s| s.steps.iter().map(|c| c.name))
        .chain([sweeps::double_fault().name])
        .collect();
    let all: Vec<cases::Case> = cases::all()
        .into_iter()
        .chain(sweeps::all().into_iter().flat_map(|s| s.steps))
        .chain([sweeps::double_fault()])
        .collect();
    let wanted = |name: &str| {
        only.is_empty()
            || only.iter().any(|n| n == name)
            || (only.iter().any(|n| n == "sweeps") && swept.contains(&name))
    };
    let mut rows = Vec::new();
    for case in all.iter().filter(|c| wanted(c.name)) {
        let path = dir.join(format!("{}.json", case.name));
        let report = if rescore {
            match std::fs::read(&path).map(|b| serde_json::from_slice(&b)) {
                Ok(Ok(report)) => report,
                Ok(Err(e)) => {
                    eprintln!("bench attribution: {}: {e}", path.display());
                    continue;
                }
                Err(e) => {
                    eprintln!(
                        "bench attribution: {}: {e}; run the case first",
                        path.display()
                    );
                    continue;
                }
            }
        } else {
            eprintln!("bench attribution: {} ({})", case.name, case.mechanism);
            let report = (case.run)();
            if let Err(e) = std::fs::write(&path, report.to_string()) {
                eprintln!("bench attribution: {}: {e}", path.display());
            }
            report
        };
        let steps = sweeps.iter().flat_map(|s| &s.steps);
        rows.push(if steps.map(|c| c.name).any(|n| n == case.name) {
            scorecard::step_row(case, &report)
        } else {
            scorecard::row(case, &report)
        });
    }
    let right = rows.iter().filter(|r| r.ok).count();
    println!("\n{}", scorecard::cases_table(&rows));
    let sensitivity = scorecard::sensitivity(&sweeps, &rows);
    let confusion = scorecard::confusion(&rows);
    let closing = scorecard::precision_recall(&rows);
    println!("sensitivity:\n{sensitivity}\nconfusion matrix:\n{confusion}\n{closing}");
    println!(
        "accuracy: {right} of {} cases ({:.0}%)",
        rows.len(),
        100.0 * right as f64 / rows.len().max(1) as f64
    );
    if rows.len() == all.len() {
        let table = format!(
            "Sensitivity (strongest first):\n\n{sensitivity}\nConfusion matrix (every case):\n\n\
             {confusion}\n```\n{closing}```\n"
        );
        let doc = root.join("docs/explain.md");
        match std::fs::read_to_string(&doc).map(|d| scorecard::publish(&d, &table)) {
            Ok(Some(text)) => {
                if let Err(e) = std::fs::write(&doc, text) {
                    eprintln!("bench attribution: {}: {e}", doc.display());
                }
            }
            Ok(None) => eprintln!("bench attribution: no bench markers in {}", doc.display()),
            Err(e) => eprintln!("bench attribution: {}: {e}", doc.display()),
        }
    }
    if right == rows.len() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

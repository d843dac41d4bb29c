//! Flags over a scenario file: a CI gate written as `stress gate.yaml --slo 'ttft_p95 < 1ms'`
//! judges the run by the flag's SLO (it used to be ignored, so the gate passed), `--target`
//! and `--model` go over the file's, and a flag of the file-less single phase is refused in
//! one line. Against `inferscope sim`; loopback only, no root needed.

use std::process::Command;

use crate::cli::stress_report;
use crate::sim_process::SimProcess;

/// Nothing listens on the file's target: only `--target` makes the run reach the sim.
const GATE: &str = "\
name: gate
target: http://127.0.0.1:9
phases:
  - name: main
    duration: 2s
    load: {shape: constant, rate: 10}
    request: {max_tokens: 4}
    slo: ['error_rate < 1%', 'ttft_p95 < 10s']
";

fn stress(file: &std::path::Path, target: &str) -> Command {
    let mut cmd = crate::cli::inferscope();
    cmd.arg("stress")
        .arg(file)
        .args(["--quiet", "--target", target]);
    cmd
}

#[test]
fn a_slo_flag_over_a_scenario_file_fails_the_gate() {
    let sim = SimProcess::start(["--ttft-ms", "5", "--itl-ms", "1"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gate.yaml");
    std::fs::write(&file, GATE).unwrap();

    // The control: the file's own SLOs hold, with --target over the file's dead target.
    let out = dir.path().join("pass.json");
    let (code, err, r) = stress_report(stress(&file, &sim.url).arg("--out").arg(&out), &out);
    assert_eq!(code, Some(0), "{err}");
    assert!(r.slo_pass);

    // The gate: the same file with a SLO no server meets fails, and the report says which.
    let out = dir.path().join("fail.json");
    let (code, err, r) = stress_report(
        stress(&file, &sim.url)
            .args(["--slo", "ttft_p95 < 1ms", "--out"])
            .arg(&out),
        &out,
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(!r.slo_pass);
    let slos: Vec<(&str, bool)> = r.phases[0]
        .slo
        .iter()
        .map(|s| (s.slo.as_str(), s.pass))
        .collect();
    assert_eq!(
        slos,
        [("error_rate < 1%", true), ("ttft_p95 < 1ms", false)],
        "the flag's ttft_p95 bound replaces the file's: {err}"
    );

    // --model goes over the file too: one the sim does not serve stops before the run.
    let (code, err) = refused(stress(&file, &sim.url).args(["--model", "llama-3-8b"]));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("model \"llama-3-8b\" is not served"), "{err}");

    // A flag of the one phase of a file-less run: one line, naming it and what to write.
    let (code, err) = refused(stress(&file, &sim.url).args(["--rate", "50"]));
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!(
            "inferscope: --rate conflicts with the scenario file {}: set `load:",
            file.display()
        )),
        "{err}"
    );
}

/// Runs a `stress` expected to stop before its run: its exit code and stderr.
fn refused(cmd: &mut Command) -> (Option<i32>, String) {
    let o = cmd.output().unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// `--service NAME=PORT`: a malformed value, a name given twice and a port nothing listens on
/// are each refused in one line before the run.
#[test]
fn a_bad_service_is_refused_in_one_line() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let taken = format!("a={port}");
    for (service, want) in [
        (&["--service", "search"][..], "give NAME=PORT"),
        (&["--service", "search=0"][..], "give NAME=PORT"),
        (&["--service", "a b=80"][..], "give NAME=PORT"),
        (
            &["--service", &taken, "--service", &taken][..],
            "given twice",
        ),
        (&["--service", "search=9"][..], "nothing listens on port 9"),
    ] {
        let (code, err) = refused(
            crate::cli::inferscope()
                .args(["stress", "--target", "http://127.0.0.1:9", "--rate", "1"])
                .args(["--duration", "1s", "--explain", "--report-dir"])
                .arg(std::env::temp_dir())
                .args(service),
        );
        assert_ne!(code, Some(0), "{service:?}: {err}");
        assert!(err.contains(want), "{service:?}: {err}");
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert!(
            lines.len() <= 2 && lines[0].contains(want),
            "{service:?}: {err}"
        );
    }
    drop(listener);
}

//! Flags over a scenario file: a CI gate written as `stress gate.yaml --slo 'ttft_p50 < 1ms'`
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
    slo: ['error_rate < 1%', 'ttft_p50 < 10s']
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
            .args(["--slo", "ttft_p50 < 1ms", "--out"])
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
        [("error_rate < 1%", true), ("ttft_p50 < 1ms", false)],
        "the flag's ttft_p50 bound replaces the file's: {err}"
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

/// A phase of 20 requests has too few samples for a p99 (it needs 300, `confidence.rs`): the
/// table shows "too few" in its place and says why, and a p99 SLO on it is undecided, neither
/// met nor broken, so the gate does not pass (exit 2) even though the observed value holds.
#[test]
fn a_p99_of_20_requests_is_too_few_samples_and_its_slo_undecided() {
    let sim = SimProcess::start(["--ttft-ms", "5", "--itl-ms", "1"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gate.yaml");
    std::fs::write(&file, GATE).unwrap();
    let out = dir.path().join("few.json");
    let mut cmd = crate::cli::inferscope();
    cmd.arg("stress")
        .arg(&file)
        .args(["--target", &sim.url, "--slo", "ttft_p99 < 10s", "--out"])
        .arg(&out);
    let o = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    let text = std::fs::read(&out).unwrap();
    let r: inferscope::loadgen::StressReport = serde_json::from_slice(&text).unwrap();
    assert_eq!(o.status.code(), Some(2), "{stdout}");
    assert!(!r.slo_pass);
    let phase = &r.phases[0];
    assert!(phase.counts.finished <= 21, "{}", phase.counts.finished);
    let p99 = phase
        .slo
        .iter()
        .find(|s| s.slo == "ttft_p99 < 10s")
        .unwrap();
    assert!(p99.pass, "the value itself held: {p99:?}");
    assert!(p99.undecided(), "{p99:?}");
    assert_eq!(p99.samples_needed, Some(300), "{p99:?}");
    assert!(p99.samples.is_some_and(|n| n < 300), "{p99:?}");
    // The p50 beside it had enough samples and decides.
    assert!(
        phase
            .slo
            .iter()
            .any(|s| s.slo == "ttft_p50 < 10s" && s.gate_passes()),
        "{:?}",
        phase.slo
    );
    let row = stdout
        .lines()
        .find(|l| l.starts_with("main "))
        .unwrap_or_else(|| panic!("no row for the phase: {stdout}"));
    assert!(row.contains("too few"), "{row}");
    assert!(row.trim_end().ends_with("few"), "{row}");
    assert!(
        stdout.contains("too few samples for a p99 (ttft from "),
        "{stdout}"
    );
    assert!(
        stdout.contains("SLO undecided: ttft_p99 < 10s: too few samples ("),
        "{stdout}"
    );
    // Said the same way in the report the table came from.
    assert!(phase.latency_ms["ttft"].is_too_few("p99"));
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

//! Flags over scenario files: each flag applied, or refused in one line.

use std::{path::Path, time::Duration};

use super::*;
use crate::loadgen::scenario::{
    files::Files,
    plan::{Plan, PlanError},
};

const FILE: &str = "target: http://127.0.0.1:1
timeout: 30s
max_in_flight: 50
seed: 1
phases:
  - name: chat
    duration: 1s
    load: {shape: constant, rate: 1}
    request: {model: file-model, max_tokens: 64, temperature: 0.2, stream: true}
    slo: ['ttft_p95 < 200ms', 'ttft_p95 > 1ms', 'error_rate < 1%']
  - name: complete
    duration: 1s
    load: {shape: constant, rate: 1}
    request: {endpoint: completions}
  - name: vec
    duration: 1s
    load: {shape: constant, rate: 1}
    request: {endpoint: vector_search, top_k: 3}
";

const VECTOR_ONLY: &str = "target: http://127.0.0.1:1
phases:
  - name: v
    duration: 1s
    load: {shape: constant, rate: 1}
    sweep: {ef_search: [16, 32]}
    request: {endpoint: vector_search, top_k: 3}
search: {slo: ['e2e_p99 < 50ms', 'rps > 1']}
";

fn parsed(src: &str) -> Scenario {
    Scenario::parse_yaml(src, "s.yaml").unwrap()
}

fn applied(src: &str, o: &Overrides) -> Result<Scenario, PlanError> {
    let plan = Plan::compile(parsed(src), &Files::Relative(Path::new(".")), o)?;
    Ok(plan.scenario().clone())
}

fn slos(texts: &[&str]) -> Vec<Slo> {
    texts.iter().map(|t| Slo::parse(t).unwrap()).collect()
}

fn texts(v: &[Slo]) -> Vec<&str> {
    v.iter().map(|s| s.text.as_str()).collect()
}

#[test]
fn no_flags_leave_the_file_as_it_is() {
    let s = applied(FILE, &Overrides::default()).unwrap();
    assert_eq!(s.target.as_str(), "http://127.0.0.1:1");
    assert_eq!(s.timeout, Duration::from_secs(30));
    assert_eq!((s.max_in_flight, s.seed), (50, Some(1)));
    assert_eq!(s.phases[0].request.model.as_deref(), Some("file-model"));
    assert_eq!(s.phases[0].slo.len(), 3);
}

#[test]
fn run_wide_flags_replace_the_files_values() {
    let o = Overrides {
        target: Some("http://[::1]:8000".parse().unwrap()),
        timeout: Some(Duration::from_secs(2)),
        max_in_flight: Some(7),
        seed: Some(42),
        ..Overrides::default()
    };
    let s = applied(FILE, &o).unwrap();
    assert_eq!(s.target.as_str(), "http://[::1]:8000");
    assert_eq!(s.timeout, Duration::from_secs(2));
    assert_eq!((s.max_in_flight, s.seed), (7, Some(42)));
}

#[test]
fn llm_flags_go_into_every_llm_phase_and_no_other() {
    let o = Overrides {
        model: Some("flag-model".into()),
        max_tokens: Some(8),
        temperature: Some(0.7),
        no_stream: true,
        ..Overrides::default()
    };
    let s = applied(FILE, &o).unwrap();
    for p in &s.phases[..2] {
        let r = &p.request;
        assert_eq!(r.model.as_deref(), Some("flag-model"), "{}", p.name);
        assert_eq!(r.max_tokens, Some(8), "{}", p.name);
        assert_eq!(
            r.temperature,
            Some(JsonTemplate::Leaf(serde_json::json!(0.7))),
            "{}",
            p.name
        );
        assert_eq!(r.stream, Some(false), "{}", p.name);
    }
    let v = &s.phases[2].request;
    assert!(v.model.is_none() && v.max_tokens.is_none() && v.temperature.is_none());
    assert!(v.stream.is_none());
}

#[test]
fn an_llm_flag_without_an_llm_phase_is_refused_naming_the_flag() {
    let cases: [(&str, Overrides); 4] = [
        (
            "--model",
            Overrides {
                model: Some("m".into()),
                ..Overrides::default()
            },
        ),
        (
            "--max-tokens",
            Overrides {
                max_tokens: Some(1),
                ..Overrides::default()
            },
        ),
        (
            "--temperature",
            Overrides {
                temperature: Some(0.1),
                ..Overrides::default()
            },
        ),
        (
            "--no-stream",
            Overrides {
                no_stream: true,
                ..Overrides::default()
            },
        ),
    ];
    for (flag, o) in cases {
        let e = applied(VECTOR_ONLY, &o).unwrap_err();
        assert!(
            matches!(&e, PlanError::Override(OverrideError::NoLlmPhase { flag: f, .. }) if *f == flag),
            "{e}"
        );
        let line = e.to_string();
        assert!(
            line.starts_with(&format!("{flag} applies to chat and completions phases")),
            "{line}"
        );
        assert!(line.contains("s.yaml") && !line.contains('\n'), "{line}");
    }
}

#[test]
fn slo_flags_are_added_to_every_phase_and_replace_the_same_bound() {
    let o = Overrides {
        slos: slos(&["ttft_p95 < 1s", "e2e_p99 < 2s"]),
        ..Overrides::default()
    };
    let s = applied(FILE, &o).unwrap();
    // The file's upper bound on ttft_p95 gives way to the flag's; its lower bound stays.
    assert_eq!(
        texts(&s.phases[0].slo),
        [
            "ttft_p95 > 1ms",
            "error_rate < 1%",
            "ttft_p95 < 1s",
            "e2e_p99 < 2s"
        ]
    );
    for p in &s.phases[1..] {
        assert_eq!(
            texts(&p.slo),
            ["ttft_p95 < 1s", "e2e_p99 < 2s"],
            "{}",
            p.name
        );
    }
}

#[test]
fn slo_flags_reach_sweep_steps_and_overrule_the_search_block() {
    let o = Overrides {
        slos: slos(&["e2e_p99 < 1s"]),
        ..Overrides::default()
    };
    let s = applied(VECTOR_ONLY, &o).unwrap();
    // Applied before validation: the sweep is expanded from the phase the flags changed.
    assert_eq!(s.phases.len(), 2);
    for p in &s.phases {
        assert_eq!(texts(&p.slo), ["e2e_p99 < 1s"], "{}", p.name);
    }
    assert_eq!(texts(&s.search.unwrap().slo), ["rps > 1"]);
}

#[test]
fn every_single_phase_flag_is_refused_with_what_to_write_instead() {
    let all = [
        (PhaseFlag::Rate, "--rate", "rate: N"),
        (PhaseFlag::Arrival, "--arrival", "shape: poisson"),
        (PhaseFlag::Connections, "--connections", "users: N"),
        (PhaseFlag::Duration, "--duration", "`duration:`"),
        (PhaseFlag::Endpoint, "--endpoint", "`request.endpoint:`"),
        (PhaseFlag::Method, "--method", "`request.method:`"),
        (PhaseFlag::Body, "--body", "`request.body:`"),
        (PhaseFlag::Prompt, "--prompt", "`request.prompt:`"),
        (
            PhaseFlag::Dimensions,
            "--dimensions",
            "`request.dimensions:`",
        ),
    ];
    for (flag, name, instead) in all {
        let o = Overrides {
            phase_flags: vec![flag],
            ..Overrides::default()
        };
        let e = applied(FILE, &o).unwrap_err();
        let line = e.to_string();
        assert!(
            line.starts_with(&format!("{name} conflicts with the scenario file s.yaml: ")),
            "{line}"
        );
        assert!(line.contains(instead), "{line}");
        assert!(!line.contains('\n'), "{line}");
    }
}

#[test]
fn a_file_is_read_overridden_and_validated_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gate.yaml");
    std::fs::write(&path, FILE).unwrap();
    let o = Overrides {
        slos: slos(&["ttft_p95 < 1ms"]),
        model: Some("m".into()),
        ..Overrides::default()
    };
    let plan = Plan::from_file(&path, &o).unwrap();
    let s = plan.scenario();
    assert!(texts(&s.phases[0].slo).contains(&"ttft_p95 < 1ms"));
    assert_eq!(s.phases[1].request.model.as_deref(), Some("m"));
    // The file's own errors keep its name and line.
    std::fs::write(
        &path,
        FILE.replace(
            "rate: 1}\n    request: {endpoint: c",
            "rate: 0}\n    request: {endpoint: c",
        ),
    )
    .unwrap();
    let e = Plan::from_file(&path, &o).unwrap_err();
    assert!(matches!(e, PlanError::Scenario(_)), "{e}");
    assert!(
        e.to_string().starts_with(&path.display().to_string()),
        "{e}"
    );
    let o = Overrides {
        phase_flags: vec![PhaseFlag::Rate],
        ..o
    };
    let e = Plan::from_file(&path, &o).unwrap_err();
    assert!(
        matches!(e, PlanError::Override(OverrideError::Conflict { .. })),
        "{e}"
    );
}

//! Scenario files and guardrails through the real binary, and one end-to-end LLM +
//! vector run against the local test server.

use crate::loadgen_support;

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use inferscope::loadgen::{Plan, scenario::Load, scenario::overrides::Overrides};

use inferscope::measure::{
    record::{Chaos, ErrorClass, TokenSource},
    report::StressReport,
    summary::decode_hist,
};

fn bin() -> Command {
    crate::cli::inferscope()
}

fn tmp(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lg-scn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// Runs `stress FILE` and returns (exit code, stderr).
fn stress_file(name: &str, text: &str) -> (i32, String) {
    let p = tmp(name, text);
    let out = bin().arg("stress").arg(&p).arg("--quiet").output().unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const HEAD: &str = "target: http://127.0.0.1:9\nphases:\n  - name: a\n";

#[test]
fn bad_files_name_file_line_and_problem() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "unknown.yaml",
            "    duration: 1s\n    load: {shape: constant, rat: 5}\n",
            "unknown.yaml:5:29: phases[0].load: unknown field `rat`",
        ),
        (
            "nodur.yaml",
            "    load: {shape: constant, rate: 5}\n",
            "nodur.yaml:3:5: phases[0]: missing field `duration`",
        ),
        (
            "shape.yaml",
            "    duration: 1s\n    load: {shape: wobbly, rate: 5}\n",
            "shape.yaml:5:19: phases[0]: unknown shape `wobbly`",
        ),
        (
            "rate.yaml",
            "    duration: 1s\n    load: {shape: poisson, rate: -3}\n",
            "rate.yaml:5:28: phases[0]: `rate: -3` must be > 0",
        ),
        (
            "dur.yaml",
            "    duration: soon\n    load: {shape: constant, rate: 5}\n",
            "dur.yaml:4:15: phases[0]: bad duration \"soon\"",
        ),
        (
            "slo.yaml",
            "    duration: 1s\n    load: {shape: constant, rate: 5}\n    slo: [\"ttft_p95 500ms\"]\n",
            "slo.yaml:6:12: phases[0]: bad SLO \"ttft_p95 500ms\": no comparison operator",
        ),
        (
            "tpl.yaml",
            "    duration: 1s\n    load: {shape: constant, rate: 5}\n    request: {prompt: \"${random_int(9,1)}\"}\n",
            "tpl.yaml:6:24: phases[0].request: bad placeholder",
        ),
        (
            "ds.yaml",
            "    duration: 1s\n    load: {shape: constant, rate: 5}\n    request: {dataset: nope}\n",
            "ds.yaml:6:15: phase `a` uses dataset `nope`, which `datasets:` does not define",
        ),
        (
            "syntax.yaml",
            "    duration: 1s\n    load: {shape: constant, rate: 5\n",
            "syntax.yaml:6:1: did not find expected",
        ),
        (
            "frac.yaml",
            "    duration: 1s\n    load: {shape: constant, rate: 5}\n    chaos: {max_tokens_one: 140%}\n",
            "frac.yaml:6:29: phases[0].chaos: fraction `140%` is not within 0..1",
        ),
    ];
    for (name, body, want) in cases {
        let (code, err) = stress_file(name, &format!("{HEAD}{body}"));
        assert_eq!(code, 1, "{name}: {err}");
        assert!(err.contains(want), "{name}: want {want:?} in {err:?}");
        assert_eq!(
            err.trim().lines().count(),
            1,
            "{name}: one-line error: {err:?}"
        );
    }
    let (_, err) = stress_file(
        "nodur2.yaml",
        &format!("{HEAD}    load: {{shape: constant, rate: 5}}\n"),
    );
    assert!(
        err.contains("missing field `duration`") && err.contains("every phase needs one"),
        "{err}"
    );
}

#[test]
fn duration_and_loopback_guardrails() {
    let out = bin()
        .args(["stress", "--target", "http://127.0.0.1:9", "--rate", "5"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--duration is required"));
    for target in ["http://10.1.2.3:8000", "http://example.com"] {
        let out = bin()
            .args([
                "stress",
                "--target",
                target,
                "--rate",
                "5",
                "--duration",
                "1s",
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains("not a loopback address: pass --allow-remote"),
            "{err}"
        );
    }
    let p = tmp(
        "remote.yaml",
        "target: http://192.0.2.1:80\nphases:\n  - {name: a, duration: 1s, load: {shape: constant, rate: 1}}\n",
    );
    let out = bin().arg("stress").arg(&p).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("--allow-remote"));
}

#[test]
fn seed_matrix_example_parses() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/seed-matrix.yaml");
    let plan = Plan::from_file(&path, &Overrides::default()).unwrap();
    let s = plan.scenario();
    let names: Vec<&str> = s.phases.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "llm-baseline",
            "llm-peak",
            "llm-chaos",
            "vector-baseline",
            "vector-peak",
            "vector-chaos"
        ]
    );
    let rates: Vec<Option<f64>> = s
        .phases
        .iter()
        .map(|p| p.load.target_rate(p.duration))
        .collect();
    assert_eq!(
        rates,
        [
            Some(20.0),
            Some(120.0),
            Some(20.0),
            Some(50.0),
            Some(400.0),
            Some(50.0)
        ]
    );
    assert!((s.phases[2].chaos.max_tokens_one - 0.1).abs() < 1e-12);
    assert_eq!(s.phases[4].request.ef_search, Some(128));
    assert_eq!(s.phases[5].events[0].path, "/v1/vector/rebuild");
    assert!(matches!(s.phases[0].load, Load::Poisson { .. }));
}

#[test]
fn end_to_end_llm_and_vector_run_writes_report_and_gates_on_slo() {
    let (addr, _stamps) = loadgen_support::start_in_thread();
    let scenario = format!(
        r#"name: e2e
target: http://{addr}
seed: 7
phases:
  - name: chat
    duration: 2s
    load: {{shape: poisson, rate: 40}}
    request: {{endpoint: chat, max_tokens: 6, prompt: "hi ${{random_int(1,9)}}", temperature: "${{random_float(0.3,0.8)}}"}}
    chaos: {{abort_mid_stream: 20%, oversize_prompt: 10%, oversize_tokens: 30000}}
    slo: ["ttft_p50 < 1ms"]
  - name: plain
    duration: 1s
    load: {{shape: concurrency, users: 4}}
    request: {{endpoint: chat, stream: false, max_tokens: 3}}
  - name: vec
    duration: 1s
    load: {{shape: constant, rate: 50}}
    request: {{endpoint: vector_search, dimensions: 8, top_k: 4, recall_sample: 100%}}
    events: [{{at: 100ms, path: /v1/vector/rebuild}}]
    slo: ["recall >= 0.7"]
"#
    );
    let p = tmp("e2e.yaml", &scenario);
    let out_json = p.with_extension("json");
    let out = bin()
        .arg("stress")
        .arg(&p)
        .arg("--out")
        .arg(&out_json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}{stderr}");
    // ttft_p50 < 1ms cannot hold against a server that waits 20 ms: exit 2.
    assert_eq!(out.status.code(), Some(2));
    assert!(stdout.contains("SLO failed: ttft_p50 < 1ms"));
    let r: StressReport = serde_json::from_slice(&std::fs::read(&out_json).unwrap()).unwrap();
    assert_eq!(
        (r.schema.as_str(), r.version),
        ("inferscope.stress.report", 1)
    );
    let chat = &r.phases[0];
    assert_eq!(chat.counts.scheduled, 80);
    assert_eq!(chat.counts.finished, 80);
    assert!(chat.latency_ms["ttft"].p50 >= 20.0);
    assert!(chat.latency_ms["itl"].count > 0);
    let recs: Vec<_> = r.records.iter().filter(|x| x.phase == 0).collect();
    assert_eq!(recs.len(), 80);
    for x in &recs {
        assert!(x.local_addr.is_some() && x.remote_addr.is_some());
        match x.chaos {
            Some(Chaos::AbortMidStream) => assert_eq!(x.error, Some(ErrorClass::Aborted)),
            Some(Chaos::OversizePrompt) => assert_eq!(
                (x.error, x.status),
                (Some(ErrorClass::HttpStatus), Some(400))
            ),
            _ => {
                assert_eq!(x.error, None, "{x:?}");
                assert_eq!(
                    (x.output_tokens, x.token_source),
                    (Some(6), Some(TokenSource::Usage))
                );
                assert_eq!(x.token_us.len(), 6);
                assert_eq!(x.finish_reason.as_deref(), Some("length"));
            }
        }
    }
    // Intentional aborts are not errors; oversize prompts are.
    let oversize = recs
        .iter()
        .filter(|x| x.chaos == Some(Chaos::OversizePrompt))
        .count();
    assert!(oversize > 0 && recs.iter().any(|x| x.chaos == Some(Chaos::AbortMidStream)));
    assert!((chat.error_rate - oversize as f64 / 80.0).abs() < 1e-9);
    // Non-streaming closed loop: tokens from usage, TTFT = E2E.
    let plain = &r.phases[1];
    assert!(plain.counts.ok > 10, "{:?}", plain.counts);
    assert_eq!(plain.load_level, "concurrency=4");
    // Vector: recall@4 of the test server is 3/4 on every query.
    let vec = &r.phases[2];
    assert_eq!(vec.counts.ok, 50);
    assert!((vec.recall.mean - 0.75).abs() < 0.01, "{:?}", vec.recall);
    assert!(vec.slo[0].pass);
    assert_eq!(r.events.len(), 1);
    assert_eq!(r.events[0].outcome, "HTTP 200");
    // Histograms decode and agree with the summaries.
    let h = decode_hist(&chat.histograms["ttft"]).unwrap();
    assert_eq!(h.len(), chat.latency_ms["ttft"].count);
}

#[test]
fn ctrl_c_stops_within_grace_and_still_writes_the_report() {
    let (addr, stamps) = loadgen_support::start_in_thread();
    // Every answer stalls for a minute, so requests are in flight when Ctrl-C comes.
    let now = std::time::Instant::now();
    *stamps.pause.lock().unwrap() = Some((now, now + std::time::Duration::from_mins(1)));
    let p = tmp(
        "sigint.yaml",
        &format!(
            "target: http://{addr}\ngrace: 1s\nphases:\n  - {{name: a, duration: 30s, load: {{shape: constant, rate: 20}}, request: {{endpoint: http}}}}\n"
        ),
    );
    let out_json = p.with_extension("json");
    let child = bin()
        .arg("stress")
        .arg(&p)
        .arg("--out")
        .arg(&out_json)
        .arg("-q")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let t = std::time::Instant::now();
    // SAFETY: plain kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    let took = t.elapsed();
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        took < std::time::Duration::from_secs(5),
        "took {took:?} with a 1 s grace"
    );
    let r: StressReport = serde_json::from_slice(&std::fs::read(&out_json).unwrap()).unwrap();
    assert_eq!(
        r.stopped.unwrap().kind,
        inferscope::loadgen::StopKind::Interrupted
    );
    assert!(r.phases[0].elapsed_s < 3.0);
    let aborted = r
        .records
        .iter()
        .filter(|x| x.error == Some(ErrorClass::Aborted))
        .count();
    assert!(
        aborted >= 20,
        "{aborted} requests aborted at the end of the grace period"
    );
}

#[test]
fn error_rate_above_threshold_aborts_the_run() {
    // Nothing listens on the discard port: every request fails to connect.
    let p = tmp(
        "abort.yaml",
        "target: http://127.0.0.1:9\nabort_error_rate: 50%\nabort_min_requests: 20\nphases:\n  - {name: a, duration: 30s, load: {shape: constant, rate: 100}, request: {endpoint: http}}\n",
    );
    let t = std::time::Instant::now();
    let out = bin().arg("stress").arg(&p).arg("-q").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}");
    assert!(t.elapsed() < std::time::Duration::from_secs(15));
    assert!(
        stdout.contains("stopped early: aborted: error rate 100.0%"),
        "{stdout}"
    );
    assert!(stdout.contains("connect"), "{stdout}");
}

#[test]
fn every_example_scenario_parses() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let plan = Plan::from_file(&path, &Overrides::default())
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            names.push((path.file_name().unwrap().to_owned(), plan));
        }
    }
    let plan = |name: &str| {
        &names
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no examples/{name}"))
            .1
    };
    // The trace replay reads its Mooncake rows; the shared-prefix one makes its prompts.
    let replay = &plan("trace-replay.yaml").scenario().phases[0];
    let sharing = replay.load.prefix_sharing().expect("a Mooncake replay");
    assert_eq!(sharing.requests, 24);
    assert!(sharing.sharing_ratio > 0.5, "{sharing:?}");
    let datasets = plan("shared-prefix.yaml").datasets();
    assert_eq!(datasets.len(), 2);
    let mut rng = <rand::rngs::SmallRng as rand::SeedableRng>::seed_from_u64(1);
    let row = datasets["support"].pick(&mut rng);
    assert!(row.prompt.split(' ').count() > 20, "{}", row.prompt);
}

#[test]
fn rag_gateway_example_parses() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/rag-gateway.yaml");
    let plan = Plan::from_file(&path, &Overrides::default()).unwrap();
    let names: Vec<&str> = plan
        .scenario()
        .phases
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(names, ["baseline", "peak", "cooldown"]);
}

#[test]
fn rag_pipeline_example_parses() {
    use inferscope::loadgen::scenario::pipeline::StepKind;
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/rag-pipeline.yaml");
    let plan = Plan::from_file(&path, &Overrides::default()).unwrap();
    let phases = &plan.scenario().phases;
    let names: Vec<&str> = phases.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["baseline", "peak"]);
    for p in phases {
        let steps: Vec<StepKind> = p
            .request
            .pipeline
            .as_ref()
            .unwrap()
            .steps
            .iter()
            .map(|s| s.kind)
            .collect();
        assert_eq!(steps, StepKind::ALL);
    }
}

//! Model discovery: the zero-flag quick start (`inferscope stress --target URL --rate 10
//! --duration 30s`, here 2 s) against `inferscope sim` uses the model `/v1/models` lists and
//! says so; a model the target does not serve stops the run before it starts, listing what
//! is served; runs posted to the control API do the same. Loopback only; no root needed.

use crate::sim_process;

use std::time::{Duration, Instant};

use sim_process::SimProcess;

use inferscope::{
    api::{LoadgenLauncher, RunLauncher as _, RunState},
    measure::report::StressReport,
};

#[test]
fn the_quick_start_finds_the_model_and_a_wrong_one_stops_before_the_run() {
    let sim = SimProcess::start(["--corpus-size", "50"]);
    // The model the run must discover is the one the sim says it serves.
    assert!(sim.banner.contains("\"inferscope-sim\""), "{}", sim.banner);
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("r.json");

    // The README's quick start, shortened: no model anywhere.
    let out = crate::cli::inferscope()
        .args([
            "stress",
            "--target",
            &sim.url,
            "--rate",
            "10",
            "--duration",
            "2s",
        ])
        .arg("--out")
        .arg(&out_path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    println!("{}{err}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(out.status.code(), Some(0), "{err}");
    let want = format!(
        "inferscope: no model given; using \"inferscope-sim\" (the first of 1 served by {}/v1/models)",
        sim.url
    );
    assert!(err.lines().any(|l| l == want), "{err}");
    let r: StressReport = serde_json::from_slice(&std::fs::read(&out_path).unwrap()).unwrap();
    let p = &r.phases[0];
    assert!(p.counts.finished >= 15, "{:?}", p.counts);
    assert!(p.counts.errors.is_empty(), "{:?}", p.counts);
    assert!(p.output_tokens > 0);

    // A model the sim does not serve: exit 2 at once, one line listing what it serves, and
    // no run (no report written).
    let wrong = dir.path().join("wrong.json");
    let t = Instant::now();
    let out = crate::cli::inferscope()
        .args([
            "stress",
            "--target",
            &sim.url,
            "--rate",
            "10",
            "--duration",
            "30s",
        ])
        .args(["--model", "llama-3-8b", "--out"])
        .arg(&wrong)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!(
            "inferscope: model \"llama-3-8b\" is not served by {}/v1/models (it serves \"inferscope-sim\")",
            sim.url
        )),
        "{err}"
    );
    assert!(!wrong.exists());

    // Plain HTTP needs no model: nothing is asked, nothing is said.
    let out = crate::cli::inferscope()
        .args(["stress", "--target", &format!("{}/health", sim.url)])
        .args([
            "--method",
            "GET",
            "--rate",
            "5",
            "--duration",
            "1s",
            "--quiet",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("model"), "{err}");
}

#[test]
fn an_unreachable_model_list_changes_nothing_but_is_said() {
    // Nothing listens on the discard port: the run goes on as before (and fails to connect).
    let out = crate::cli::inferscope()
        .args(["stress", "--target", "http://127.0.0.1:9", "--rate", "5"])
        .args(["--duration", "1s", "--quiet"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let note = err
        .lines()
        .find(|l| l.contains("/v1/models"))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(
        note.starts_with(
            "inferscope: no model given and http://127.0.0.1:9/v1/models did not list one ("
        ),
        "{note}"
    );
    assert!(
        note.ends_with("sending model \"default\" (give --model)"),
        "{note}"
    );
    assert!(err.contains("failed with `connect` errors"), "{err}");
    assert_eq!(out.status.code(), Some(1), "{err}");
}

/// Polls the launcher until the run has ended.
async fn finished(l: &LoadgenLauncher, id: &str) -> inferscope::api::RunStatus {
    for _ in 0..300 {
        let s = l.status(id).unwrap();
        if !matches!(s.state, RunState::Running | RunState::Stopping) {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{id} did not finish in 30 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_posted_to_the_control_api_discover_the_model_too() {
    let mut cfg = inferscope::sim::profile("healthy").unwrap();
    cfg.vector.corpus_size = 10;
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let sim = inferscope::sim::start(cfg, l).await.unwrap();
    let launcher = LoadgenLauncher::new(inferscope::dial::Reach::Loopback, None);
    let scenario = |request: &str| {
        format!(
            "target: {}\nphases:\n  - {{name: a, duration: 1s, load: {{shape: constant, rate: 10}}, request: {request}}}\n",
            sim.url()
        )
    };

    let run = launcher.start(&scenario("{max_tokens: 4}")).unwrap();
    let status = finished(&launcher, &run.id).await;
    assert_eq!(status.state, RunState::Finished, "{status:?}");
    let report = launcher.report(&run.id).unwrap();
    let counts = &report["phases"][0]["counts"];
    assert!(counts["ok"].as_u64().unwrap() >= 5, "{counts}");
    assert_eq!(counts["errors"], serde_json::json!({}), "{counts}");

    let run = launcher
        .start(&scenario("{model: gpt-4o, max_tokens: 4}"))
        .unwrap();
    let status = finished(&launcher, &run.id).await;
    assert_eq!(status.state, RunState::Failed, "{status:?}");
    let error = status.error.unwrap();
    assert!(
        error.contains("model \"gpt-4o\" is not served by") && error.contains("inferscope-sim"),
        "{error}"
    );
    assert!(launcher.report(&run.id).is_none(), "no run, no report");
    sim.shutdown().await.unwrap();
}

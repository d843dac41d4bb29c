//! `compute` end to end on the sim: an engine whose every step grows with its batch, read with
//! its metrics and without them, at two strengths (1 -> 8 and 1 -> 4 streams), and a healthy
//! engine whose batch grows as much without its steps slowing, which must not be `compute`.
//! (The llama.cpp cases are in `llamacpp_e2e.rs`.) Needs root (eBPF).

use inferscope_tests::{
    cases,
    explain::{assert_peak, describe, peak},
    root_or_skip,
};

fn check(name: &str, all: &[&str], any: &[&str]) {
    let Some(_machine) = root_or_skip(name) else {
        return;
    };
    let case = cases::named(name);
    let report = (case.run)();
    assert_peak(&report, case.expected, all, any);
}

#[test]
fn a_sim_engine_whose_steps_grow_with_the_batch_is_compute() {
    check(
        "compute-sim",
        &["itl_p50_ms", "in_flight_max"],
        &["batch_mean", "server_tpot_ms"],
    );
}

#[test]
fn without_server_metrics_the_client_and_kernel_still_name_compute() {
    check(
        "compute-sim-nometrics",
        &["itl_p50_ms", "in_flight_max"],
        &["engine_busy_share", "gpu_sync_per_launch_ms"],
    );
}

#[test]
fn a_healthy_engine_batching_more_streams_is_not_compute() {
    let Some(_machine) = root_or_skip("healthy-sim-streams") else {
        return;
    };
    let report = (cases::named("healthy-sim-streams").run)();
    let p = peak(&report);
    println!("{}", describe(p));
    // The bench expects `none`; on a machine shared with other work a healthy sim's latency can
    // rise (`unexplained`, seen once in CI-like load). What this test is about: its batch grew
    // 4x with steps as long as before, which is never `compute`.
    assert_ne!(p["dominant"], "compute", "{}", describe(p));
    for w in report["verdicts"].as_array().expect("verdicts") {
        if w["phase"] == "peak" {
            assert_ne!(w["verdict"]["cause"], "compute", "{w:#}");
        }
    }
}

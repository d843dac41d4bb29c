//! Verdicts from kernel evidence on targets and faults the simulator does not make: a server
//! without `/metrics` that queues, random packet loss on loopback and in a namespace, a vector
//! index rebuilt under load, a peak whose requests all fail, an engine on a stand-in CUDA
//! device that allocates as it goes or reserves up front, and a healthy server without metrics.
//! Each case is defined once in `inferscope_tests::cases` (the attribution benchmark runs the
//! same ones). Needs root (eBPF), `python3`, `nft` and `cargo build -p inferscope`.

use inferscope_tests::{
    cases,
    explain::{assert_peak, describe},
    root_or_skip,
};

/// Runs case `name` and asserts its peak's verdict, with at least one of `any` in the evidence.
fn check(name: &str, any: &[&str]) {
    let Some(_machine) = root_or_skip(name) else {
        return;
    };
    let case = cases::named(name);
    let report = (case.run)();
    assert_peak(&report, case.expected, &[], any);
}

#[test]
fn server_without_metrics_that_queues_is_queue_from_the_kernel() {
    check("queue-nometrics", &["kernel_first_token_p50_ms"]);
}

/// Ten times a metric-less server's capacity with a 300-prompt dataset: every phase judged.
/// The peak is `queue` with an overload line (asked, completed, timed out), never a stampede:
/// the dataset repeats within a request's wait by chance, not within one prefill.
#[test]
fn overload_with_a_finite_dataset_is_queue_never_a_stampede() {
    let name = "queue-overload-nometrics";
    let Some(_machine) = root_or_skip(name) else {
        return;
    };
    let report = (cases::named(name).run)();
    let p = assert_peak(&report, "queue", &[], &["kernel_first_token_p50_ms"]);
    let overload = &p["overload"];
    assert!(
        overload["timed_out"].as_u64().unwrap_or(0) > 0,
        "{overload}"
    );
    assert!(
        overload["completed_rps"].as_f64().unwrap() < overload["asked_rps"].as_f64().unwrap() / 2.0,
        "{overload}"
    );
    for w in report["verdicts"].as_array().unwrap() {
        assert_ne!(w["verdict"]["cause"], "duplicate_prefill", "{w}");
    }
    let phase = |name: &str| {
        report["phases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("no phase {name}"))
    };
    // 1 req/s of 0.64 s answers on 4 slots: nothing waits.
    assert_eq!(
        phase("baseline")["dominant"],
        "none",
        "{}",
        describe(phase("baseline"))
    );
    // The cooldown's requests wait behind the peak's, and time out with them.
    let cooldown = &phase("cooldown")["dominant"];
    assert!(
        ["queue", "errors"].contains(&cooldown.as_str().unwrap_or_default()),
        "{}",
        describe(phase("cooldown"))
    );
}

/// An engine that allocates its KV as requests come, near the device's capacity: its
/// allocations return out-of-memory (the CUDA uprobes on the stand-in driver see each), it frees
/// what its allocator kept and retries, then fails the request.
#[test]
fn an_engine_allocating_as_it_goes_past_the_device_is_gpu_memory() {
    check("gpu-memory-as-you-go", &["gpu_oom"]);
}

/// The same engine and load with its KV reserved up front: requests wait for room in the pool,
/// no allocation fails, and no window names GPU memory.
#[test]
fn an_engine_that_reserves_up_front_waits_and_is_queue_never_gpu_memory() {
    let name = "gpu-memory-up-front";
    let Some(_machine) = root_or_skip(name) else {
        return;
    };
    let report = (cases::named(name).run)();
    assert_peak(&report, "queue", &[], &["kernel_first_token_p50_ms"]);
    for w in report["verdicts"].as_array().unwrap() {
        assert_ne!(w["verdict"]["cause"], "gpu_memory", "{w}");
    }
}

#[test]
fn server_that_leaves_requests_unread_is_queue_from_the_backlog() {
    check("queue-backlog-nometrics", &["read_delay_ms"]);
}

#[test]
fn healthy_server_without_metrics_is_none() {
    check("healthy-nometrics", &[]);
}

#[test]
fn random_loss_on_loopback_is_network_with_retransmits() {
    check("loss-loopback", &["loss_hit_share", "retransmits"]);
}

#[test]
fn random_loss_in_a_namespace_without_metrics_is_network() {
    // Loss shows as requests hit by retransmits, or as the transit stalls it causes: a first
    // token written by the server and read late, behind a lost segment or its delayed ACK.
    check(
        "loss-netns-nometrics",
        &["loss_hit_share", "retransmits", "client_server_gap_ms"],
    );
}

#[test]
fn vector_index_rebuild_is_vector_index() {
    // The client's tail or recall, or the kernel's timing of the sim's answers beside the sim's
    // own rebuild counter (`server tail`, what the node agent uses without records).
    check(
        "vector-rebuild",
        &["e2e_p99_ms", "recall_mean", "kernel_exchange_p99_ms"],
    );
}

#[test]
fn a_peak_of_failing_requests_is_errors() {
    check("errors", &["error_rate"]);
}

#[test]
fn a_cpu_quota_on_the_server_is_cpu_runqueue() {
    check("cpu-quota", &["runq_p99_us", "runq_mean_us"]);
}

#[test]
fn a_server_killed_mid_run_is_errors_and_the_report_is_written() {
    check("errors-server-killed", &["error_rate"]);
}

#[test]
fn a_first_token_held_in_the_servers_socket_is_network() {
    check("nagle-nometrics", &["client_server_gap_ms"]);
}

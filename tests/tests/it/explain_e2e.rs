//! End to end, one test per verdict: the real `inferscope sim` in its own process with a
//! bottleneck produced on purpose, and `inferscope stress --explain` against it (a `baseline`
//! phase at low load, then a `peak` phase). Each asserts the dominant verdict of the peak phase
//! in report.json and that its evidence names the signals of that bottleneck.
//!
//! Needs root (eBPF) and `cargo build -p inferscope`. The sim runs on CPU 1 and the load
//! generator on CPU 0, so that CPU hogs can be aimed at one of them.
use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use inferscope_tests::{
    Hogs, NetNs, Sim,
    collector::Collector,
    explain::{
        BASELINE, FIRST, LOADGEN_CPU, Load, PEAK, SIM_CPU, Stress, assert_peak, describe, loopback,
        run, run_with, scenario,
    },
    root_or_skip,
};
use serde_json::Value;

/// Also exported over OTLP to a collector: the run's request spans, read back from it, carry
/// the kernel's stages of each request and the verdict of the window it was sent in.
#[test]
fn kv_pressure_is_kv_cache() {
    let Some(_machine) = root_or_skip("kv_pressure_is_kv_cache") else {
        return;
    };
    let Some(collector) = Collector::start("kv_pressure_is_kv_cache") else {
        return;
    };
    let endpoint = collector.endpoint();
    // 256 blocks of 16 tokens: a request of 128 + 384 tokens grows from 8 blocks at admission
    // (vLLM admits on the prompt's blocks) to 32, so at low load the cache has room and at
    // the peak it admits more than fit once they decode: running sequences get preempted and
    // the rest wait with the cache full (more blocks than the profile's 64, so that one
    // finishing request does not empty half the cache between two scrapes).
    let report = run_with(
        "kv",
        "kv-pressure",
        &inferscope_tests::cases::KV_PRESSURE_SIM,
        &inferscope_tests::cases::kv_pressure_load(),
        &[
            "--otlp-endpoint",
            &endpoint,
            "--otlp-protocol",
            "http/protobuf",
        ],
    );
    assert_peak(&report, "kv_cache", &[], &["kv_usage", "preemptions_per_s"]);
    request_spans_carry_kernel_stages_and_verdicts(&report, &collector.spans());
    // The scrape recognised the sim's vLLM metrics: what to do speaks vLLM's terms.
    let hint = inferscope_tests::explain::peak(&report)["hint"]
        .as_str()
        .unwrap_or_default();
    assert!(hint.contains("gpu_memory_utilization"), "{hint}");
    // Admitting more would need room the cache does not have.
    assert!(!hint.contains("raise max_num_seqs"), "{hint}");
}

/// Each request span read back from the collector carries the verdict of the report's window
/// it was meant to be sent in, and those the kernel joined carry its stages as children,
/// inside the request; the peak's spans include `kv_cache` ones.
fn request_spans_carry_kernel_stages_and_verdicts(report: &Value, spans: &[Value]) {
    let requests: Vec<&Value> = spans
        .iter()
        .filter(|s| s["name"] == "inferscope.request")
        .collect();
    let windows = report["verdicts"].as_array().expect("report.verdicts");
    let len_ms = report["timeline"]["len_ms"]
        .as_f64()
        .expect("timeline.len_ms");
    assert!(
        requests.len() >= 20,
        "{} request spans of {} spans",
        requests.len(),
        spans.len()
    );
    let ms = |span: &Value, key: &str| span[key].as_f64().unwrap_or_default() / 1e6;
    let (mut joined, mut kv_cache_in_peak) = (0, 0);
    for r in &requests {
        let start = ms(r, "start_unix_nano");
        let window = windows
            .iter()
            .rev()
            .find(|w| w["start_unix_ms"].as_f64().unwrap_or(f64::MAX) <= start)
            .filter(|w| start < w["start_unix_ms"].as_f64().unwrap_or_default() + len_ms);
        let verdict = r["attributes"]["inferscope.verdict"].as_str();
        assert_eq!(
            verdict,
            window.and_then(|w| w["verdict"]["cause"].as_str()),
            "span {r:#}"
        );
        let children: Vec<&Value> = spans
            .iter()
            .filter(|c| c["parent_span_id"] == r["span_id"] && c["trace_id"] == r["trace_id"])
            .collect();
        let kernel: Vec<&&Value> = children
            .iter()
            .filter(|c| {
                c["name"]
                    .as_str()
                    .unwrap_or_default()
                    .starts_with("kernel.")
            })
            .collect();
        for c in &kernel {
            assert!(
                ms(c, "start_unix_nano") >= start - 0.001
                    && ms(c, "end_unix_nano") <= ms(r, "end_unix_nano") + 0.001,
                "kernel stage outside its request: {c:#}\n{r:#}"
            );
        }
        if kernel
            .iter()
            .any(|c| c["name"] == "kernel.server_first_token")
        {
            joined += 1;
        }
        if r["attributes"]["phase"] == "peak" && verdict == Some("kv_cache") {
            kv_cache_in_peak += 1;
        }
    }
    println!(
        "{} request spans: {joined} with the kernel's stages, {kv_cache_in_peak} of the peak read kv_cache",
        requests.len()
    );
    assert!(
        joined * 2 >= requests.len(),
        "{joined} of {} request spans carry the kernel's stages",
        requests.len()
    );
    assert!(kv_cache_in_peak > 0, "no peak request span reads kv_cache");
}

/// A KV cache full from the baseline on: 64 blocks of 16 tokens hold two 512-token requests,
/// and the baseline's 4 req/s of ~1 s answers keep three to four of them wanting room. No
/// rise over such a baseline shows the peak's cause; what is full and who waits for it does:
/// every phase that sends is `kv_cache`, and the baseline is named as no healthy reference.
/// The run's time line is the unit fixture `sim_saturated_baseline.json`.
#[test]
fn a_kv_cache_full_from_the_baseline_on_is_kv_cache_in_every_phase() {
    let Some(_machine) = root_or_skip("a_kv_cache_full_from_the_baseline_on") else {
        return;
    };
    let report = run(
        "kvsat",
        "kv-pressure",
        &[],
        &inferscope_tests::cases::llm(4.0, 12.0, 384),
    );
    let phases = report["phases"].as_array().expect("phases");
    let named = |name: &str| {
        phases
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("no phase {name}: {:#}", report["phases"]))
    };
    let notes = |p: &Value| p["notes"].to_string();
    let base = named("baseline");
    assert_eq!(base["dominant"], "kv_cache", "{}", describe(base));
    assert!(
        notes(base).contains("the baseline is not a healthy reference"),
        "{}",
        notes(base)
    );
    let peak = named("peak");
    assert_eq!(peak["dominant"], "kv_cache", "{}", describe(peak));
    assert!(
        notes(peak).contains("compared against a saturated baseline"),
        "{}",
        notes(peak)
    );
    for p in phases {
        assert_ne!(p["dominant"], "duplicate_prefill", "{}", describe(p));
        let hint = p["hint"].as_str().unwrap_or_default();
        assert!(
            !hint.contains("raise max_num_seqs"),
            "{}: {hint}",
            p["name"]
        );
    }
}

#[test]
fn queue_bound_is_queue() {
    let Some(_machine) = root_or_skip("queue_bound_is_queue") else {
        return;
    };
    // 4 sequences at a time, each ~256 steps of ~2 ms: ~7 req/s at most.
    let report = run(
        "queue",
        "queue-bound",
        &[],
        &Load {
            baseline_rps: 2.0,
            peak_rps: 12.0,
            input_tokens: 128,
            output_tokens: 256,
            peak_input_tokens: None,
            peak_output_tokens: None,
        },
    );
    let p = assert_peak(
        &report,
        "queue",
        &[],
        &["waiting", "queue_time_p95_ms", "queue_share_of_ttft"],
    );
    // The sim exports no slot cap: the ceiling its running count held while requests
    // waited is the cap, every slot taken, the cache with room; raising the cap is advice.
    let saturated = p["saturated"].as_str().unwrap_or_default();
    assert!(
        saturated.contains("every admission slot taken"),
        "{saturated}"
    );
    let hint = p["hint"].as_str().unwrap_or_default();
    assert!(hint.contains("raise max_num_seqs"), "{hint}");
    assert!(!hint.contains("if the KV cache has room"), "{hint}");
}

#[test]
fn healthy_at_low_load_is_none() {
    let Some(_machine) = root_or_skip("healthy_at_low_load_is_none") else {
        return;
    };
    let report = run(
        "none",
        "healthy",
        &[],
        &inferscope_tests::cases::llm(2.0, 4.0, 32),
    );
    let p = assert_peak(&report, "none", &[], &[]);
    assert_eq!(p["untrustworthy"], false, "{}", describe(p));
    assert_kernel_times_inside_the_clients(&report);
}

/// Each sampled request's server-side times (the kernel's read of the request, first write,
/// first token, last write) land inside the client's own: sent <= read <= first write <=
/// first token written <= first token read, and the last write before the client's end. Both
/// sides read `CLOCK_MONOTONIC`; the client's times have µs resolution and it stamps "sent" just
/// before its write, so 1 ms of slack is allowed.
fn assert_kernel_times_inside_the_clients(report: &Value) {
    const SLACK_MS: f64 = 1.0;
    let waterfalls = report["waterfalls"].as_array().expect("waterfalls");
    let ms = |w: &Value, k: &str| w[k].as_f64();
    let mut joined = 0;
    for w in waterfalls {
        let Some(received) = ms(w, "server_received_ms") else {
            continue;
        };
        joined += 1;
        let order = [
            ("sent", ms(w, "sent_ms")),
            ("server_received", Some(received)),
            ("server_first_byte", ms(w, "server_first_byte_ms")),
            ("server_first_token", ms(w, "server_first_token_ms")),
            ("client_first_token", ms(w, "client_first_token_ms")),
        ];
        for pair in order.windows(2) {
            let ((first, at), (then, later)) = (pair[0], pair[1]);
            let (at, later) = (
                at.unwrap_or_else(|| panic!("{first} in {w}")),
                later.unwrap_or_else(|| panic!("{then} in {w}")),
            );
            assert!(
                at <= later + SLACK_MS,
                "{first} {at:.3} ms after {then} {later:.3} ms: {w}"
            );
        }
        let (first_token, last, end) = (
            ms(w, "server_first_token_ms").unwrap(),
            ms(w, "server_last_byte_ms").unwrap_or_else(|| panic!("server_last_byte in {w}")),
            ms(w, "end_ms").unwrap(),
        );
        assert!(
            first_token <= last && last <= end + SLACK_MS,
            "last write {last:.3} ms: {w}"
        );
    }
    // The slow tail of each phase is kept besides the uniform sample.
    let slowest = waterfalls
        .iter()
        .filter(|w| w["sample"] == "slowest_e2e")
        .count();
    assert!(
        slowest >= 10,
        "{slowest} slowest-E2E waterfalls over two phases and more"
    );
    assert!(
        joined * 10 >= waterfalls.len() * 9,
        "{joined} of {} waterfalls joined with the kernel's exchange",
        waterfalls.len()
    );
}

/// Like [`run`], with `hogs` busy loops at nice -10 pinned to `hog_cpu` during the peak phase
/// only: they start when the baseline has run (counted from the first request the sim sees)
/// and stop when the peak's duration is over.
fn run_with_peak_hogs(name: &str, load: &Load, hogs: usize, hog_cpu: usize) -> Value {
    let sim = Sim::start(
        &["taskset", "-c", &SIM_CPU.to_string()],
        "healthy",
        loopback(),
        &[],
    );
    // The generator runs ahead of other work unless it is the one to be starved; then it runs
    // at nice 10 under the hogs' -10, so it lags however little CPU it needs per request (at
    // nice 0 a generator that got cheaper kept within 10 ms of its schedule).
    let nice = if hog_cpu == LOADGEN_CPU { 10 } else { FIRST };
    let stress = Stress::start(
        name,
        &scenario(name, &sim.url(), load),
        Some(LOADGEN_CPU),
        nice,
        &[],
    );
    sim.wait_for_load(Duration::from_mins(1));
    std::thread::sleep(BASELINE);
    {
        let _hogs = Hogs::start_on(hogs, -10, hog_cpu);
        std::thread::sleep(PEAK);
    }
    stress.finish()
}

#[test]
fn cpu_hogs_on_the_engine_cpu_are_cpu_runqueue() {
    let Some(_machine) = root_or_skip("cpu_hogs_on_the_engine_cpu_are_cpu_runqueue") else {
        return;
    };
    let report = run_with_peak_hogs(
        "cpu",
        &Load {
            baseline_rps: 8.0,
            peak_rps: 8.0,
            input_tokens: 128,
            output_tokens: 32,
            peak_input_tokens: None,
            peak_output_tokens: None,
        },
        2,
        SIM_CPU,
    );
    assert_peak(
        &report,
        "cpu_runqueue",
        &[],
        &["runq_p99_us", "runq_mean_us"],
    );
}

#[test]
fn starved_load_generator_is_loadgen_and_untrustworthy() {
    let Some(_machine) = root_or_skip("starved_load_generator_is_loadgen_and_untrustworthy") else {
        return;
    };
    let report = run_with_peak_hogs(
        "loadgen",
        &Load {
            baseline_rps: 20.0,
            peak_rps: 20.0,
            input_tokens: 128,
            output_tokens: 32,
            peak_input_tokens: None,
            peak_output_tokens: None,
        },
        2,
        LOADGEN_CPU,
    );
    let p = assert_peak(
        &report,
        "loadgen",
        &[],
        &["send_lag_p95_ms", "loadgen_runq_p99_us"],
    );
    assert_eq!(
        p["untrustworthy"],
        true,
        "latencies of a starved generator are marked untrustworthy: {}",
        describe(p)
    );
}

/// The most extreme `loadgen`: the generator stopped (`SIGSTOP`, as a debugger or a frozen
/// cgroup does) through the whole peak, so it sends none of the peak's arrivals (the first
/// ~100 ms of them at most, before the stop). The peak is in the report all the same, whole
/// (no drain after a first send), `loadgen`, with what it never sent; the phases around it are
/// healthy.
#[test]
fn a_generator_stopped_through_a_whole_phase_is_loadgen_with_its_unsent_count() {
    let Some(_machine) = root_or_skip("a_generator_stopped_through_a_whole_phase") else {
        return;
    };
    let sim = Sim::start(
        &["taskset", "-c", &SIM_CPU.to_string()],
        "healthy",
        loopback(),
        &[],
    );
    let load = Load {
        baseline_rps: 10.0,
        peak_rps: 20.0,
        input_tokens: 128,
        output_tokens: 32,
        peak_input_tokens: None,
        peak_output_tokens: None,
    };
    let stress = Stress::start(
        "stopped",
        &scenario("stopped", &sim.url(), &load),
        Some(LOADGEN_CPU),
        FIRST,
        &[],
    );
    let signal = |sig: &str| {
        let ok = std::process::Command::new("kill")
            .args([sig, &stress.pid().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {sig}");
    };
    sim.wait_for_load(Duration::from_mins(1));
    std::thread::sleep(BASELINE);
    signal("-STOP");
    // Past the phase's end and the generator's slack (100 ms) for a late send, so that none
    // of the peak's arrivals can be sent in a burst on waking; the cooldown's first 300 ms are
    // sent late, one window of its four.
    std::thread::sleep(PEAK + Duration::from_millis(300));
    signal("-CONT");
    let report = stress.finish();
    let phases: Vec<&Value> = report["phases"]
        .as_array()
        .expect("phases")
        .iter()
        .collect();
    let named = |name: &str| {
        phases
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("no phase {name} in the report: {:#}", report["phases"]))
    };
    let p = named("peak");
    assert_eq!(p["dominant"], "loadgen", "{}", describe(p));
    let unsent = p["load"]["unsent"].as_u64().unwrap_or(0);
    assert!(
        unsent >= 150,
        "the peak's 200 arrivals unsent: {unsent}: {}",
        describe(p)
    );
    assert!(
        phases.iter().all(|p| p["name"] != "peak (drain)"),
        "the windows the peak never sent in are not its drain: {:#}",
        report["phases"]
    );
    for other in ["baseline", "cooldown"] {
        let o = named(other);
        assert_eq!(o["dominant"], "none", "{}", describe(o));
    }
}

#[test]
fn gpu_memory_profile_is_gpu_memory() {
    let Some(_machine) = root_or_skip("gpu_memory_profile_is_gpu_memory") else {
        return;
    };
    // Device memory leaves workspace for a 512-token step: the baseline's 128-token prompts
    // fit, the peak's ~640-token prefills do not (out-of-memory, as a long prompt's
    // activations can be on a real GPU sized for its KV cache).
    let report = run(
        "gpu",
        "gpu-memory",
        &[],
        &Load {
            baseline_rps: 1.0,
            peak_rps: 30.0,
            input_tokens: 128,
            output_tokens: 32,
            peak_input_tokens: Some(640),
            peak_output_tokens: None,
        },
    );
    assert_peak(
        &report,
        "gpu_memory",
        &[],
        &["gpu_oom", "gpu_mem_used_frac"],
    );
}

#[test]
fn congested_link_is_network() {
    let Some(_machine) = root_or_skip("congested_link_is_network") else {
        return;
    };
    let ns = NetNs::create("net");
    let cpu = SIM_CPU.to_string();
    let sim = Sim::start(
        &["ip", "netns", "exec", &ns.name, "taskset", "-c", &cpu],
        "healthy",
        std::net::SocketAddr::from((NetNs::NS_ADDR, 8000)),
        &[],
    );
    let load = Load {
        baseline_rps: 4.0,
        peak_rps: 4.0,
        input_tokens: 128,
        output_tokens: 32,
        peak_input_tokens: None,
        peak_output_tokens: None,
    };
    let pid = sim.pid().to_string();
    // The sim is in another network namespace: name its pid (the port is not ours to see).
    let stress = Stress::start(
        "net",
        &scenario("net", &sim.url(), &load),
        None,
        FIRST,
        &["--allow-remote", "--pid", &pid],
    );
    sim.wait_for_load(Duration::from_mins(1));
    std::thread::sleep(BASELINE);
    // The peak: 2 Mbit/s each way, and a bulk flow from the namespace (the direction the
    // answers travel) that keeps the bottleneck queue full.
    ns.shape("2mbit");
    let stop = Arc::new(AtomicBool::new(false));
    let sink =
        std::net::TcpListener::bind(std::net::SocketAddr::from((NetNs::HOST_ADDR, 0))).unwrap();
    let sink_addr = sink.local_addr().unwrap();
    let reader = std::thread::spawn(move || {
        if let Ok((mut s, _)) = sink.accept() {
            let _ = std::io::copy(&mut s, &mut std::io::sink());
        }
    });
    let s = Arc::clone(&stop);
    let writer = ns.spawn_inside(move || {
        use std::io::Write as _;
        let mut c = std::net::TcpStream::connect(sink_addr).unwrap();
        let chunk = vec![0u8; 64 * 1024];
        while !s.load(Ordering::Relaxed) {
            if c.write_all(&chunk).is_err() {
                break;
            }
        }
    });
    std::thread::sleep(PEAK);
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    reader.join().unwrap();
    let report = stress.finish();
    assert_peak(
        &report,
        "network",
        &[],
        &["srtt_mean_us", "retransmits", "client_server_gap_ms"],
    );
    drop(sim);
}

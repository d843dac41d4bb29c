//! End to end, one test per verdict: the real `inferscope sim` in its own process with a
//! bottleneck produced on purpose, and `inferscope stress --explain` against it (a `baseline`
//! phase at low load, then a `peak` phase). Each asserts the dominant verdict of the peak phase
//! in report.json and that its evidence names the signals of that bottleneck.
//!
//! Needs root (eBPF) and `cargo build -p inferscope`. The sim runs on CPU 1 and the load
//! generator on CPU 0, so that CPU hogs can be aimed at one of them.
use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use inferscope_tests::{Hogs, NetNs, Sim, free_port, inferscope_bin, root_or_skip};
use serde_json::Value;

/// The tests share the CPUs they pin work to: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const SIM_CPU: usize = 1;
const LOADGEN_CPU: usize = 0;
const BASELINE: Duration = Duration::from_secs(8);
const PEAK: Duration = Duration::from_secs(10);
const COOLDOWN: Duration = Duration::from_secs(4);

/// Load of one test: request rates of the two phases and the synthetic request sizes.
struct Load {
    baseline_rps: f64,
    peak_rps: f64,
    input_tokens: u32,
    output_tokens: u32,
    /// Prompt size of the peak phase, when it differs from `input_tokens`.
    peak_input_tokens: Option<u32>,
}

fn scenario(name: &str, target: &str, l: &Load) -> String {
    let phase = |phase: &str, secs: u64, rate: f64, dataset: &str| {
        format!(
            "  - name: {phase}\n    duration: {secs}s\n    load: {{shape: constant, rate: {rate}}}\n    request: {{endpoint: chat, model: inferscope-sim, dataset: {dataset}, stream: true}}\n"
        )
    };
    let dataset = |dataset: &str, input: u32| {
        format!(
            "  {dataset}:\n    synthetic:\n      input_tokens: {{mean: {input}, stddev: {}}}\n      output_tokens: {{mean: {}, stddev: {}}}\n      count: 500\n",
            input / 8,
            l.output_tokens,
            l.output_tokens / 8,
        )
    };
    format!(
        "name: e2e-{name}\ntarget: {target}\ntimeout: 30s\ngrace: 2s\nseed: 7\ndatasets:\n{}{}phases:\n{}{}{}",
        dataset("chat", l.input_tokens),
        dataset("peak", l.peak_input_tokens.unwrap_or(l.input_tokens)),
        phase("baseline", BASELINE.as_secs(), l.baseline_rps, "chat"),
        phase("peak", PEAK.as_secs(), l.peak_rps, "peak"),
        // Requests queued at the peak drain here, with the generator still sending (windows
        // where it sends nothing have no send lag to judge it by).
        phase("cooldown", COOLDOWN.as_secs(), l.baseline_rps, "chat"),
    )
}

/// A running `inferscope stress --explain`.
struct Stress {
    child: Child,
    dir: PathBuf,
}

impl Stress {
    /// Writes the scenario and starts the run at niceness `nice`, on `cpu` when given.
    fn start(name: &str, yaml: &str, cpu: Option<usize>, nice: i32, extra: &[&str]) -> Self {
        let dir =
            std::env::temp_dir().join(format!("inferscope-e2e-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("scenario.yaml");
        std::fs::write(&file, yaml).unwrap();
        let cpus = cpu.map_or_else(|| "0-1023".to_owned(), |c| c.to_string());
        let child = Command::new("taskset")
            .args(["-c", &cpus, "nice", "-n", &nice.to_string()])
            .arg(inferscope_bin())
            .arg("stress")
            .arg(&file)
            .args(["--explain", "--quiet", "--report-dir"])
            .arg(&dir)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Self { child, dir }
    }

    /// Waits for the run; returns report.json.
    fn finish(self) -> Value {
        let out = self.child.wait_with_output().unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        println!("{stdout}");
        assert!(
            out.status.success(),
            "inferscope stress --explain failed ({}):\n{stderr}",
            out.status
        );
        let path = self.dir.join("report.json");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}\nstderr:\n{stderr}", path.display()));
        let report: Value = serde_json::from_str(&text).unwrap();
        let _ = std::fs::remove_dir_all(&self.dir);
        report
    }
}

fn peak(report: &Value) -> &Value {
    report["phases"]
        .as_array()
        .expect("report.phases")
        .iter()
        .find(|p| p["name"] == "peak")
        .unwrap_or_else(|| panic!("no peak phase in {:#}", report["phases"]))
}

/// Summary of a phase for failure messages: verdict shares and the evidence lines.
fn describe(p: &Value) -> String {
    let ev: Vec<String> = p["evidence"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    format!(
                        "{}={} ({}, met {})",
                        e["signal"].as_str().unwrap_or("?"),
                        e["value"],
                        e["note"].as_str().unwrap_or(""),
                        e["met"]
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    format!(
        "phase {}: dominant {} confidence {}; shares {}; evidence [{}]; runners-up {}; missing {}",
        p["name"],
        p["dominant"],
        p["confidence"],
        p["shares"],
        ev.join(", "),
        p["runners_up"],
        p["missing"]
    )
}

/// Signals whose test held in the phase's evidence.
fn met_signals(p: &Value) -> Vec<String> {
    p["evidence"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|e| e["met"] == true)
                .filter_map(|e| e["signal"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Asserts the peak phase's verdict and that every signal of `all` (and at least one of `any`,
/// when given) held in its evidence. Returns the peak phase.
fn assert_peak<'a>(report: &'a Value, verdict: &str, all: &[&str], any: &[&str]) -> &'a Value {
    let base = report["phases"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["name"] == "baseline"))
        .map_or_else(|| "no baseline phase".to_owned(), describe);
    let p = peak(report);
    println!("{base}\n{}", describe(p));
    assert_eq!(
        p["dominant"],
        verdict,
        "dominant verdict of the peak phase\n{base}\n{}",
        describe(p)
    );
    let met = met_signals(p);
    for s in all {
        assert!(
            met.iter().any(|m| m == s),
            "evidence of {verdict} lacks {s}: {}",
            describe(p)
        );
    }
    if !any.is_empty() {
        assert!(
            any.iter().any(|s| met.iter().any(|m| m == s)),
            "evidence of {verdict} names none of {any:?}: {}",
            describe(p)
        );
    }
    p
}

fn loopback() -> std::net::SocketAddr {
    std::net::SocketAddr::from(([127, 0, 0, 1], free_port()))
}

/// Niceness of the load generator and the sim when they must not be the ones starved: the
/// machine may be busy with other work (a shared 2-CPU builder), and a generator or engine that
/// waits for a CPU is (rightly) called `loadgen` or `cpu_runqueue`.
const FIRST: i32 = -10;

/// Starts the sim, runs the scenario, returns report.json. Neither is pinned: on a busy
/// machine a generator confined to one CPU lags, and the verdict is (rightly) `loadgen`.
fn run(name: &str, profile: &str, sim_flags: &[&str], load: &Load) -> Value {
    let sim = Sim::start(
        &["nice", "-n", &FIRST.to_string()],
        profile,
        loopback(),
        sim_flags,
    );
    Stress::start(name, &scenario(name, &sim.url(), load), None, FIRST, &[]).finish()
}

#[test]
fn kv_pressure_is_kv_cache() {
    if !root_or_skip("kv_pressure_is_kv_cache") {
        return;
    }
    let _one = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // 256 blocks of 16 tokens: a request of 128 + 384 tokens grows from 8 blocks at admission
    // (vLLM admits on the prompt's blocks) to 32, so at low load the cache has room and at
    // the peak it admits more than fit once they decode: running sequences get preempted and
    // the rest wait with the cache full (more blocks than the profile's 64, so that one
    // finishing request does not empty half the cache between two scrapes).
    let report = run(
        "kv",
        "kv-pressure",
        &["--num-gpu-blocks", "256"],
        &Load {
            baseline_rps: 2.0,
            peak_rps: 16.0,
            input_tokens: 128,
            output_tokens: 384,
            peak_input_tokens: None,
        },
    );
    assert_peak(&report, "kv_cache", &[], &["kv_usage", "preemptions_per_s"]);
}

#[test]
fn queue_bound_is_queue() {
    if !root_or_skip("queue_bound_is_queue") {
        return;
    }
    let _one = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
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
        },
    );
    assert_peak(
        &report,
        "queue",
        &[],
        &["waiting", "queue_time_p95_ms", "queue_share_of_ttft"],
    );
}

#[test]
fn healthy_at_low_load_is_none() {
    if !root_or_skip("healthy_at_low_load_is_none") {
        return;
    }
    let _one = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let report = run(
        "none",
        "healthy",
        &[],
        &Load {
            baseline_rps: 2.0,
            peak_rps: 4.0,
            input_tokens: 128,
            output_tokens: 32,
            peak_input_tokens: None,
        },
    );
    let p = assert_peak(&report, "none", &[], &[]);
    assert_eq!(p["untrustworthy"], false, "{}", describe(p));
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
    // The generator runs ahead of other work unless it is the one to be starved.
    let nice = if hog_cpu == LOADGEN_CPU { 0 } else { FIRST };
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
    if !root_or_skip("cpu_hogs_on_the_engine_cpu_are_cpu_runqueue") {
        return;
    }
    let _one = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let report = run_with_peak_hogs(
        "cpu",
        &Load {
            baseline_rps: 8.0,
            peak_rps: 8.0,
            input_tokens: 128,
            output_tokens: 32,
            peak_input_tokens: None,
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
    if !root_or_skip("starved_load_generator_is_loadgen_and_untrustworthy") {
        return;
    }
    let _one = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let report = run_with_peak_hogs(
        "loadgen",
        &Load {
            baseline_rps: 20.0,
            peak_rps: 20.0,
            input_tokens: 128,
            output_tokens: 32,
            peak_input_tokens: None,
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

#[test]
fn gpu_memory_profile_is_gpu_memory() {
    if !root_or_skip("gpu_memory_profile_is_gpu_memory") {
        return;
    }
    let _one = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
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
    if !root_or_skip("congested_link_is_network") {
        return;
    }
    let _one = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
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

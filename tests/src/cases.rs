//! Bottlenecks produced by different mechanisms, each run with `inferscope stress --explain`
//! (baseline, peak, cooldown) and returning report.json. The root e2e tests assert the peak's
//! verdict of each; `cargo xtask bench attribution` runs them all and prints expected vs got.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{
    NetNs, Sim,
    explain::{
        BASELINE, FIRST, Load, NO_SERVER_METRICS, Stress, loopback, run, scenario, streams_scenario,
    },
    faults::{Alloc, CpuQuota, NoMetricsServer, RandomLoss, Writes, during_peak},
};

/// One case: how the bottleneck is made, and the verdict its peak phase must get.
pub struct Case {
    /// Short name.
    pub name: &'static str,
    /// The mechanism, in words.
    pub mechanism: &'static str,
    /// Expected dominant verdict of the peak phase.
    pub expected: &'static str,
    /// Runs it; returns report.json.
    pub run: fn() -> Value,
}

/// Every case, healthy ones included; llama.cpp's when the engine is built (`cargo xtask
/// setup`; otherwise says they were left out).
#[must_use]
pub fn all() -> Vec<Case> {
    let mut all = without_the_engine();
    if crate::engine::built_or_skip("the llama.cpp cases") {
        all.extend(crate::llamacpp_cases::all());
    }
    all
}

/// The cases that do not need llama.cpp's server.
fn without_the_engine() -> Vec<Case> {
    let mut all = sim_and_python();
    all.extend(without_metrics());
    all.extend(crate::pipeline::cases());
    all.extend(crate::stampede::cases());
    all
}

/// The cases against the sim and the Python servers.
fn sim_and_python() -> Vec<Case> {
    vec![
        Case {
            name: "kv-pressure",
            mechanism: "sim, KV cache of 256 blocks, 2 -> 16 req/s",
            expected: "kv_cache",
            run: kv_pressure,
        },
        Case {
            name: "queue-sim",
            mechanism: "sim queue-bound profile (4 sequences at once), 2 -> 12 req/s",
            expected: "queue",
            run: queue_sim,
        },
        Case {
            name: "cpu-quota",
            mechanism: "sim in a cgroup-v1 cpu group throttled to 5% of a CPU during the peak, 8 req/s",
            expected: "cpu_runqueue",
            run: || cpu_quota(5),
        },
        Case {
            name: "errors-server-killed",
            mechanism: "sim killed 2 s into the peak: every later request fails to connect",
            expected: "errors",
            run: server_killed,
        },
        Case {
            name: "compute-sim",
            mechanism: "sim whose steps cost 2 ms + 1.5 ms per sequence (half on its CPU, half blocked in cuStreamSynchronize), 256 sequences and 4096 KV blocks, 1 -> 8 streams",
            expected: "compute",
            run: || compute_sim(8, true),
        },
        Case {
            name: "compute-sim-nometrics",
            mechanism: "the compute-sim engine, 1 -> 4 streams, its /metrics left unread",
            expected: "compute",
            run: || compute_sim(4, false),
        },
        Case {
            name: "healthy-sim-streams",
            mechanism: "sim healthy profile (2 ms + 20 us per sequence), 1 -> 4 streams: the batch grows, each step barely",
            expected: "none",
            run: healthy_sim_streams,
        },
        Case {
            name: "healthy-sim",
            mechanism: "sim healthy profile, 2 -> 4 req/s",
            expected: "none",
            run: healthy_sim,
        },
        Case {
            name: "loss-loopback",
            mechanism: "sim, nftables drops 10% of the server's segments on loopback",
            expected: "network",
            run: || loss_loopback(10),
        },
        Case {
            name: "loss-netns-nometrics",
            mechanism: "Python server in a netns, nftables drops 5% both ways on its veth",
            expected: "network",
            run: || loss_netns(5),
        },
        Case {
            name: "vector-rebuild",
            mechanism: "sim vector index rebuilt during the peak (50 QPS)",
            expected: "vector_index",
            run: vector_rebuild,
        },
        Case {
            name: "errors",
            mechanism: "peak requests a route the server does not have (HTTP 404)",
            expected: "errors",
            run: errors,
        },
    ]
}

/// The cases against the Python server without `/metrics` (the kernel's and the client's
/// evidence alone).
fn without_metrics() -> Vec<Case> {
    vec![
        Case {
            name: "queue-nometrics",
            mechanism: "Python server without /metrics, 2 slots, 2 -> 30 req/s",
            expected: "queue",
            run: || nometrics(2, 30.0, Writes::Nagle),
        },
        Case {
            name: "nagle-nometrics",
            mechanism: "Python server without /metrics, 4 slots, 2 -> 24 req/s: never more than 4 in flight (no queue), the first token waits ~40 ms in the server's socket (Nagle and the client's delayed ACK)",
            expected: "network",
            run: || nometrics(4, 24.0, Writes::Nagle),
        },
        Case {
            name: "queue-overload-nometrics",
            mechanism: "Python server without /metrics, 4 slots of 32 tokens x 20 ms (~6 req/s), a 300-prompt dataset, 1 -> 60 req/s (10x): requests wait, time out, and the finite dataset repeats by chance",
            expected: "queue",
            run: overload_nometrics,
        },
        Case {
            name: "queue-backlog-nometrics",
            mechanism: "Python server without /metrics serving one connection at a time (HTTP/1.0): requests wait unread in the listen backlog, 2 -> 40 req/s",
            expected: "queue",
            run: backlog,
        },
        Case {
            name: "gpu-memory-as-you-go",
            mechanism: "Python engine on a 1 GiB CUDA stand-in (a libcuda.so.1 hooked as the driver), 512 MiB of weights, each request's KV (256 KiB a token, ~40 MiB) allocated as it comes by a caching allocator, 32 slots, 2 -> 30 req/s: past 12 at once allocations return out-of-memory, the kept blocks are freed and the allocation retried, then the request fails",
            expected: "gpu_memory",
            run: || on_device(Alloc::AsYouGo),
        },
        Case {
            name: "gpu-memory-up-front",
            mechanism: "the same engine reserving the rest of the device as one KV pool at start, as vLLM and SGLang do: past 12 at once requests wait for room, and no allocation fails",
            expected: "queue",
            run: || on_device(Alloc::UpFront),
        },
        Case {
            name: "healthy-nometrics",
            mechanism: "Python server without /metrics, 16 slots, TCP_NODELAY (as asyncio servers set it), 2 -> 8 req/s",
            expected: "none",
            run: || nometrics(16, 8.0, Writes::NoDelay),
        },
    ]
}

/// The case called `name` (a llama.cpp case whether or not the engine is built: its test asks
/// [`crate::engine::built_or_skip`] before running it).
#[must_use]
pub fn named(name: &str) -> Case {
    without_the_engine()
        .into_iter()
        .chain(crate::llamacpp_cases::all())
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no case {name}"))
}

/// A baseline and peak of `output_tokens`-token answers to 128-token prompts.
#[must_use]
pub fn llm(baseline_rps: f64, peak_rps: f64, output_tokens: u32) -> Load {
    Load {
        baseline_rps,
        peak_rps,
        input_tokens: 128,
        output_tokens,
        peak_input_tokens: None,
        peak_output_tokens: None,
    }
}

/// The sim flags and load of the KV-pressure case: a cache of 256 blocks fills at the 16
/// req/s peak of 384-token answers.
pub const KV_PRESSURE_SIM: [&str; 2] = ["--num-gpu-blocks", "256"];

/// See [`KV_PRESSURE_SIM`].
#[must_use]
pub fn kv_pressure_load() -> Load {
    llm(2.0, 16.0, 384)
}

fn kv_pressure() -> Value {
    run("kv", "kv-pressure", &KV_PRESSURE_SIM, &kv_pressure_load())
}

fn queue_sim() -> Value {
    run("queue", "queue-bound", &[], &llm(2.0, 12.0, 256))
}

/// A sim engine whose step grows with its batch: 2 ms + 1.5 ms per sequence, with room for
/// 256 sequences and 4096 KV blocks (64 streams of 100 tokens use under 2%).
pub const COMPUTE_SIM_TOML: &str = "[cost]\nfixed_us = 2000.0\nper_seq_us = 1500.0\nper_prefill_token_us = 5.0\ncpu_fraction = 0.5\n";

/// 1 stream, then `users`, against [`COMPUTE_SIM_TOML`]; `metrics` false leaves `/metrics`
/// unread.
fn compute_sim(users: u32, metrics: bool) -> Value {
    let dir = std::env::temp_dir().join(format!("inferscope-compute-sim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("sim.toml");
    std::fs::write(&config, COMPUTE_SIM_TOML).unwrap();
    let config = config.to_string_lossy().into_owned();
    let sim = Sim::start(
        &["nice", "-n", &FIRST.to_string()],
        "",
        loopback(),
        &["--config", &config],
    );
    let name = if metrics { "compute" } else { "compute-nm" };
    let yaml = streams_scenario(name, &sim.url(), "inferscope-sim", users, 32, 64);
    let extra: &[&str] = if metrics { &[] } else { &NO_SERVER_METRICS };
    let r = Stress::start(name, &yaml, None, FIRST, extra).finish();
    drop(sim);
    let _ = std::fs::remove_dir_all(&dir);
    r
}

fn healthy_sim_streams() -> Value {
    let sim = Sim::start(
        &["nice", "-n", &FIRST.to_string()],
        "healthy",
        loopback(),
        &[],
    );
    // 4 streams, as compute-sim-nometrics: at 8 the sim's own per-stream work (HTTP, SSE) on
    // a 2-CPU machine slows its steps.
    let yaml = streams_scenario("none-streams", &sim.url(), "inferscope-sim", 4, 32, 64);
    Stress::start("none-streams", &yaml, None, FIRST, &[]).finish()
}

fn healthy_sim() -> Value {
    run("none", "healthy", &[], &llm(2.0, 4.0, 32))
}

/// The Python server admits `slots` requests at a time, 32 tokens of 4 ms each (~8 req/s per
/// slot): the peak's `peak_rps` overflows 2 slots, not 16.
fn nometrics(slots: u32, peak_rps: f64, writes: Writes) -> Value {
    let server = NoMetricsServer::start(&[], loopback(), slots, 4.0, writes);
    let yaml = scenario("nometrics", &server.url(), &llm(2.0, peak_rps, 32))
        .replace("model: inferscope-sim", "model: nometrics");
    let r = Stress::start("nometrics", &yaml, None, FIRST, &[]).finish();
    drop(server);
    r
}

/// The engine on the CUDA stand-in (see the two `gpu-memory-*` cases).
fn on_device(alloc: Alloc) -> Value {
    let server = NoMetricsServer::start_on_device(loopback(), 32, 20.0, alloc, [1024, 512, 256]);
    let yaml = scenario("device", &server.url(), &llm(2.0, 30.0, 32))
        .replace("model: inferscope-sim", "model: nometrics");
    let r = Stress::start("device", &yaml, None, FIRST, &[]).finish();
    drop(server);
    r
}

/// Open loop at ten times a metric-less server's capacity with a finite dataset (as `vllm
/// bench --num-prompts` or a `ShareGPT` subset is): 4 slots, each answer 32 tokens of 20 ms
/// (0.64 s: ~6 req/s), 300 prompts at 1 req/s, then 60 req/s. The peak's 600 requests queue
/// far longer than the 30 s timeout allows.
fn overload_nometrics() -> Value {
    let server = NoMetricsServer::start(&[], loopback(), 4, 20.0, Writes::NoDelay);
    let dataset = |name: &str| {
        format!(
            "  {name}:\n    synthetic:\n      input_tokens: {{mean: 128, stddev: 16}}\n      output_tokens: {{mean: 32, stddev: 4}}\n      count: 300\n"
        )
    };
    let head = format!("datasets:\n{}", dataset("chat"));
    let yaml = crate::explain::three_phases("overload", &server.url(), &head, |p| {
        crate::explain::Phase {
            load: format!(
                "{{shape: constant, rate: {}}}",
                if p == "peak" { 60 } else { 1 }
            ),
            request: "{endpoint: chat, model: nometrics, dataset: chat, stream: true}".to_owned(),
            more: String::new(),
        }
    });
    let r = Stress::start("overload", &yaml, None, FIRST, &[]).finish();
    drop(server);
    r
}

/// A synchronous server, 16 tokens of 2 ms (~25 req/s at most): the peak waits in its backlog.
fn backlog() -> Value {
    let server = NoMetricsServer::start_sync(&[], loopback(), 2.0);
    let yaml = scenario("backlog", &server.url(), &llm(2.0, 40.0, 16))
        .replace("model: inferscope-sim", "model: nometrics");
    let r = Stress::start("backlog", &yaml, None, FIRST, &[]).finish();
    drop(server);
    r
}

/// Waits until `pid` has an established TCP connection (the load reached it), reading the
/// server's own network namespace (`/proc/PID/net/tcp`).
fn wait_for_connection(pid: u32, within: Duration) {
    let deadline = std::time::Instant::now() + within;
    loop {
        let tcp = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).unwrap_or_default();
        // State 01 is ESTABLISHED (the 4th column).
        if tcp
            .lines()
            .skip(1)
            .any(|l| l.split_whitespace().nth(3) == Some("01"))
        {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no connection reached pid {pid}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The healthy sim and a run against it at `rps` (baseline, peak and cooldown alike), returned
/// once the baseline phase has run: the caller makes the peak's fault.
fn healthy_sim_past_baseline(name: &str, rps: f64, output_tokens: u32) -> (Sim, Stress) {
    let sim = Sim::start(
        &["nice", "-n", &FIRST.to_string()],
        "healthy",
        loopback(),
        &[],
    );
    let stress = Stress::start(
        name,
        &scenario(name, &sim.url(), &llm(rps, rps, output_tokens)),
        None,
        FIRST,
        &[],
    );
    sim.wait_for_load(Duration::from_mins(1));
    std::thread::sleep(BASELINE);
    (sim, stress)
}

/// The healthy sim at 4 req/s; `percent` of its segments dropped on loopback during the peak.
#[must_use]
pub fn loss_loopback(percent: u32) -> Value {
    let (sim, stress) = healthy_sim_past_baseline("loss", 4.0, 64);
    let loss = RandomLoss::from_port(sim.addr.port(), percent);
    std::thread::sleep(crate::explain::PEAK);
    drop(loss);
    stress.finish()
}

fn loss_netns(percent: u32) -> Value {
    let ns = NetNs::create("loss");
    let addr = std::net::SocketAddr::from((NetNs::NS_ADDR, 8000));
    // Nagle on, as Python's http.server leaves it: loss then also stalls small writes behind
    // lost or delayed ACKs, which is what makes 5% loss felt at 4 req/s in every window. With
    // TCP_NODELAY a fresh-clone CI run saw one stall in ten windows (verdict none).
    let server = NoMetricsServer::start(
        &["ip", "netns", "exec", &ns.name],
        addr,
        16,
        4.0,
        Writes::Nagle,
    );
    let pid = server.pid().to_string();
    let yaml = scenario("lossns", &server.url(), &llm(4.0, 4.0, 32))
        .replace("model: inferscope-sim", "model: nometrics");
    let stress = Stress::start(
        "lossns",
        &yaml,
        None,
        FIRST,
        &["--allow-remote", "--pid", &pid],
    );
    wait_for_connection(server.pid(), Duration::from_mins(1));
    during_peak(Instant::now(), || {
        RandomLoss::on_device(&ns.name, &ns.ns_dev, percent)
    });
    let r = stress.finish();
    drop(server);
    drop(ns);
    r
}

fn vector_rebuild() -> Value {
    let sim = Sim::start(
        &["nice", "-n", &FIRST.to_string()],
        "healthy",
        loopback(),
        &[],
    );
    let phase = |name: &str, secs: u64, events: &str| {
        format!(
            "  - name: {name}\n    duration: {secs}s\n    load: {{shape: poisson, rate: 50}}\n    request: {{endpoint: vector_search, text: \"${{choice(gpu memory, kv cache, run queue)}} ${{random_int(1,100000)}}\", top_k: 10, recall_sample: 10%}}\n{events}"
        )
    };
    let yaml = format!(
        "name: e2e-vector\ntarget: {}\ntimeout: 30s\ngrace: 2s\nseed: 7\nphases:\n{}{}{}",
        sim.url(),
        phase("baseline", BASELINE.as_secs(), ""),
        phase(
            "peak",
            crate::explain::PEAK.as_secs(),
            "    events:\n      - {at: 1s, method: POST, path: /v1/vector/rebuild}\n"
        ),
        phase("cooldown", crate::explain::COOLDOWN.as_secs(), ""),
    );
    let r = Stress::start("vector", &yaml, None, FIRST, &[]).finish();
    drop(sim);
    r
}

/// The sim at 8 req/s; its cgroup gets `percent`% of a CPU when the peak starts.
#[must_use]
pub fn cpu_quota(percent: u32) -> Value {
    let (sim, stress) = healthy_sim_past_baseline("quota", 8.0, 32);
    let group = CpuQuota::holding(sim.pid());
    group.limit(percent);
    std::thread::sleep(crate::explain::PEAK);
    drop(group);
    stress.finish()
}

/// The sim is killed 2 s into the peak; the run goes on against nothing.
fn server_killed() -> Value {
    let (sim, stress) = healthy_sim_past_baseline("killed", 4.0, 32);
    std::thread::sleep(Duration::from_secs(2));
    drop(sim);
    stress.finish_with_report()
}

fn errors() -> Value {
    let sim = Sim::start(
        &["nice", "-n", &FIRST.to_string()],
        "healthy",
        loopback(),
        &[],
    );
    let yaml = scenario("errors", &sim.url(), &llm(4.0, 4.0, 32));
    // The peak posts to a route the server does not have: every request fails with 404. (Not
    // an unknown model: `stress` checks the model against /v1/models and would not start.)
    let yaml = yaml.replacen(
        "  - name: peak\n    duration: 10s\n    load: {shape: constant, rate: 4}\n    request: {endpoint: chat, model: inferscope-sim",
        "  - name: peak\n    duration: 10s\n    load: {shape: constant, rate: 4}\n    request: {endpoint: chat, path: /v1/no-such-route, model: inferscope-sim",
        1,
    );
    assert!(yaml.contains("no-such-route"), "{yaml}");
    let r = Stress::start("errors", &yaml, None, FIRST, &[]).finish_with_report();
    drop(sim);
    r
}

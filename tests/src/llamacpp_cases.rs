//! Bottlenecks of a production engine, llama.cpp's `llama-server`, each made by the engine's
//! own mechanism: few slots for many requests (its deferred queue), a CPU quota on its
//! process, loss on its socket, a KV cache too small for the sequences it holds, and healthy
//! runs at two loads. Each case says what the engine's own metrics and logs show.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{
    Hogs, NetNs,
    cases::{Case, llm},
    engine::{Config, LlamaServer, MODEL},
    explain::{
        self, BASELINE, FIRST, Load, NO_SERVER_METRICS, PEAK, Stress, loopback, scenario,
        streams_scenario,
    },
    faults::{CpuQuota, RandomLoss, during_peak},
};

/// The llama.cpp cases.
#[must_use]
pub fn all() -> Vec<Case> {
    vec![
        Case {
            name: "llamacpp-queue",
            mechanism: "llama-server, 2 slots, 1 -> 4 req/s of answers that take 0.5 s alone (64 tokens where a token takes 7 ms): requests wait for a free slot (llamacpp:requests_deferred)",
            expected: "queue",
            run: queue,
        },
        Case {
            name: "llamacpp-cpu-quota",
            mechanism: "llama-server in a cgroup-v1 cpu group throttled to 10% of a CPU during the peak, 2 req/s",
            expected: "cpu_runqueue",
            run: cpu_quota,
        },
        Case {
            name: "llamacpp-noisy-neighbour",
            mechanism: "llama-server pinned to CPU 1 at 1 req/s; two busy loops at its own priority join it on CPU 1 during the peak",
            expected: "cpu_runqueue",
            run: noisy_neighbour,
        },
        Case {
            name: "llamacpp-loss-netns",
            mechanism: "llama-server in a netns, nftables drops 25% of segments both ways on its veth, 2 req/s (it closes every connection after a stream, so loss hits connects as well as streams)",
            expected: "network",
            run: loss_netns,
        },
        Case {
            name: "llamacpp-kv-exhausted",
            mechanism: "llama-server, one KV pool of 512 tokens shared by 4 slots (--kv-unified), 0.5 req/s of 128+32 tokens, then 128+256 at a rate that keeps two in flight (1 req/s where a token takes 7 ms): two sequences no longer fit, decode finds no free cell at batch size 1 and every running request fails with \"Context size has been exceeded.\"",
            expected: "errors",
            run: kv_exhausted,
        },
        Case {
            name: "llamacpp-compute-2",
            mechanism: "llama-server, one compute thread, 8 slots, 1 -> 2 streams of 64 tokens: every step carries both sequences (free slots, nothing deferred)",
            expected: "compute",
            run: || compute(2, true),
        },
        Case {
            name: "llamacpp-compute-4",
            mechanism: "llama-server, one compute thread, 8 slots, 1 -> 4 streams of 64 tokens",
            expected: "compute",
            run: || compute(4, true),
        },
        Case {
            name: "llamacpp-compute-4-nometrics",
            mechanism: "as llamacpp-compute-4 with its /metrics left unread: the client's ITL and concurrency, the kernel's view of its process",
            expected: "compute",
            run: || compute(4, false),
        },
        Case {
            name: "llamacpp-stampede",
            mechanism: "llama-server, 4 slots, 1 req/s of fresh prompts; peak: each second 3 copies of one fresh prompt at once (sized to about 50 ms of prefill each alone): every copy takes a free slot and prefills the same prompt, which no slot holds yet",
            expected: "duplicate_prefill",
            run: stampede,
        },
        Case {
            name: "llamacpp-healthy-low",
            mechanism: "llama-server, 8 slots, 0.5 req/s of 32 tokens throughout",
            expected: "none",
            run: || healthy(0.5),
        },
        Case {
            name: "llamacpp-healthy-high",
            mechanism: "llama-server, 8 slots, 1.5 req/s of 32 tokens throughout (about half of its one core)",
            expected: "none",
            run: || healthy(1.5),
        },
    ]
}

/// The scenario of `load` against `server`: the engine's model, `ignore_eos` so every answer
/// has its asked length (a random model stops early at random).
fn engine_scenario(name: &str, server: &LlamaServer, load: &Load) -> String {
    scenario(name, &server.url(), load)
        .replace("model: inferscope-sim", &format!("model: {MODEL}"))
        .replace("stream: true}", "stream: true, ignore_eos: true}")
}

fn start(cfg: &Config) -> LlamaServer {
    LlamaServer::start(&["nice", "-n", &FIRST.to_string()], loopback(), cfg)
}

/// Runs `load` against a server started with `cfg`; returns report.json.
fn run(name: &str, cfg: &Config, load: &Load) -> Value {
    run_on(start(cfg), name, load)
}

/// Runs `load` against `server`; returns report.json.
fn run_on(server: LlamaServer, name: &str, load: &Load) -> Value {
    let r = Stress::start(
        name,
        &engine_scenario(name, &server, load),
        None,
        FIRST,
        &[],
    )
    .finish_with_report();
    drop(server);
    r
}

/// Two slots, answers that take 0.5 s alone: 0.5 in flight at the baseline, 2 at the peak
/// before batching doubles each step (one compute thread), so requests wait for a slot.
fn queue() -> Value {
    let server = start(&Config::slots(2));
    // 128 + 896 tokens fill a slot of 1,024.
    let tokens = server
        .speed()
        .tokens_lasting(Duration::from_millis(500))
        .clamp(32, 896);
    run_on(server, "llama-queue", &llm(1.0, 4.0, tokens))
}

/// One compute thread, 8 slots (free ones), and HTTP threads for every stream and the scraper:
/// 1 stream, then `users`, each decode step carrying every sequence. With `metrics` false the
/// run leaves `/metrics` unread.
fn compute(users: u32, metrics: bool) -> Value {
    let cfg = Config {
        http_threads: 8,
        ..Config::slots(8)
    };
    let server = start(&cfg);
    let name = if metrics {
        "llama-compute"
    } else {
        "llama-compute-nm"
    };
    let yaml = streams_scenario(name, &server.url(), MODEL, users, 32, 64);
    let extra: &[&str] = if metrics { &[] } else { &NO_SERVER_METRICS };
    let r = Stress::start(name, &yaml, None, FIRST, extra).finish_with_report();
    drop(server);
    r
}

fn healthy(rps: f64) -> Value {
    run("llama-healthy", &Config::slots(8), &llm(rps, rps, 32))
}

/// Bursts of 3 copies of one prompt on 4 slots. llama.cpp keeps each slot's last prompt and
/// gives a request the free slot whose cache is most like it; copies that arrive together find
/// no slot holding their prompt (a fresh one per burst: `${random_int}` first, rendered once
/// per burst) and each prefills it. The prompt's size follows the engine's speed, so one
/// prefill takes about 50 ms alone on any machine (the copies share the engine's one compute
/// thread: a burst costs three).
fn stampede() -> Value {
    let server = start(&Config::slots(4));
    let per_token = server.speed().prompt.as_secs_f64() / 128.0;
    let words = ((0.05 / per_token) as usize).clamp(32, 512);
    let request = format!(
        "{{endpoint: chat, model: {MODEL}, prompt: \"${{random_int(1,1000000000)}} {}\", max_tokens: 8, stream: true, ignore_eos: true}}",
        "why did the latency rise ".repeat(words / 5)
    );
    let yaml = explain::three_phases("llama-stampede", &server.url(), "", |p| explain::Phase {
        load: "{shape: constant, rate: 1}".into(),
        request: request.clone(),
        more: if p == "peak" {
            "    chaos: {stampede: {size: 3, every: 1s}}\n".into()
        } else {
            String::new()
        },
    });
    let r = Stress::start("llama-stampede", &yaml, None, FIRST, &[]).finish_with_report();
    drop(server);
    r
}

/// One KV pool of 512 cells for 4 slots: a baseline request (128 + 32 tokens) fits twice over,
/// a peak request (128 + 256) once. llama.cpp (tools/server/server-context.cpp, the decode
/// loop) first evicts idle slots' cached prompts and halves the batch; when a batch of one
/// still finds no free cell it fails every processing slot with "Context size has been
/// exceeded." and clears them. It has no preemption and no swap: KV exhaustion is an error,
/// not a wait.
fn kv_exhausted() -> Value {
    let cfg = Config {
        slots: 4,
        ctx: 512,
        unified: true,
        threads: 1,
        http_threads: 4,
    };
    let server = start(&cfg);
    // 1.8 peak requests in flight on average (constant arrivals: every one overlaps the next).
    let peak_rps = 1.8 / server.speed().request(256).as_secs_f64();
    let load = Load {
        peak_output_tokens: Some(256),
        ..llm(0.5, (peak_rps * 10.0).round().clamp(5.0, 80.0) / 10.0, 32)
    };
    run_on(server, "llama-kv", &load)
}

/// The server at `rps` throughout, returned once the baseline ran: the caller makes the fault.
fn past_baseline(name: &str, rps: f64) -> (LlamaServer, Stress) {
    let server = start(&Config::slots(4));
    let stress = Stress::start(
        name,
        &engine_scenario(name, &server, &llm(rps, rps, 32)),
        None,
        FIRST,
        &[],
    );
    wait_for_first_request(&server);
    std::thread::sleep(BASELINE);
    (server, stress)
}

/// Waits until the load's first request reached the server.
fn wait_for_first_request(server: &LlamaServer) {
    let deadline = std::time::Instant::now() + Duration::from_mins(1);
    // The first request in flight (or one already done, between two reads): the load's start
    // within a poll, not the first answer's end (which on a slow machine is seconds later and
    // would shift a fault timed from here out of its phase).
    let started = || {
        server.metric("requests_processing").unwrap_or(0.0) > 0.0
            || server.metric("tokens_predicted_total").unwrap_or(0.0) > 0.0
    };
    while !started() {
        assert!(
            std::time::Instant::now() < deadline,
            "no request reached llama-server"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Two busy loops at the engine's own niceness on its CPU: each of its threads now waits for
/// its turn (a third of the CPU), with no quota and nothing in the engine changed.
fn noisy_neighbour() -> Value {
    let server = LlamaServer::start(
        &["taskset", "-c", "1", "nice", "-n", &FIRST.to_string()],
        loopback(),
        &Config::slots(4),
    );
    let name = "llama-noisy";
    let stress = Stress::start(
        name,
        &engine_scenario(name, &server, &llm(1.0, 1.0, 32)),
        Some(0),
        FIRST,
        &[],
    );
    wait_for_first_request(&server);
    std::thread::sleep(BASELINE);
    let hogs = Hogs::start_on(2, FIRST, 1);
    std::thread::sleep(PEAK);
    drop(hogs);
    let r = stress.finish_with_report();
    drop(server);
    r
}

fn cpu_quota() -> Value {
    let (server, stress) = past_baseline("llama-quota", 2.0);
    let group = CpuQuota::holding(server.pid());
    group.limit(10);
    std::thread::sleep(PEAK);
    drop(group);
    let r = stress.finish_with_report();
    drop(server);
    r
}

/// Loss of the netns case, both ways. A stream of small segments recovers most losses within
/// a token's time (the next segments' duplicate ACKs, RACK): 5% both ways stalled 1 request in
/// 20 here, a handshake's 1 s SYN timeout. Lost handshakes and final segments are what llama.cpp's
/// users feel, as it opens a connection per stream. 15% at 2 req/s hit too few of a window's
/// two requests (one run in four read the peak `none`, 1 network window of 10); at 4 req/s the
/// delayed requests reached the engine together and their batch read `compute` after the peak.
/// 25% at 2 req/s: the peak `network` in 60-80% of its windows, the cooldown `none` (5 of 5).
const LOSS_PERCENT: u32 = 25;

/// In a namespace of its own, so that loss can take both directions on its veth: requests and
/// answers, and the handshakes of the connections llama-server closes after every stream.
fn loss_netns() -> Value {
    let ns = NetNs::create("llamaloss");
    let addr = std::net::SocketAddr::from((NetNs::NS_ADDR, 8000));
    let server = LlamaServer::start(
        &[
            "ip",
            "netns",
            "exec",
            &ns.name,
            "nice",
            "-n",
            &FIRST.to_string(),
        ],
        addr,
        &Config::slots(4),
    );
    let pid = server.pid().to_string();
    let name = "llama-lossns";
    let stress = Stress::start(
        name,
        &engine_scenario(name, &server, &llm(2.0, 2.0, 32)),
        None,
        FIRST,
        &["--allow-remote", "--pid", &pid],
    );
    wait_for_first_request(&server);
    during_peak(Instant::now(), || {
        RandomLoss::on_device(&ns.name, &ns.ns_dev, LOSS_PERCENT)
    });
    let r = stress.finish_with_report();
    drop(server);
    drop(ns);
    r
}

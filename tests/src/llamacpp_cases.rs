//! Bottlenecks of a production engine, llama.cpp's `llama-server`, each made by the engine's
//! own mechanism: few slots for many requests (its deferred queue), a CPU quota on its
//! process, loss on its socket, a KV cache too small for the sequences it holds, and healthy
//! runs at two loads. Each case says what the engine's own metrics and logs show.

use std::time::Duration;

use serde_json::Value;

use crate::{
    cases::{Case, llm},
    engine::{Config, LlamaServer, MODEL},
    explain::{BASELINE, FIRST, Load, PEAK, Stress, loopback, scenario},
    faults::{CpuQuota, RandomLoss},
};

/// The llama.cpp cases.
#[must_use]
pub fn all() -> Vec<Case> {
    vec![
        Case {
            name: "llamacpp-queue",
            mechanism: "llama-server, 2 slots, 1 -> 8 req/s of 64 tokens: requests wait for a free slot (llamacpp:requests_deferred)",
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
            name: "llamacpp-loss",
            mechanism: "llama-server, nftables drops 10% of its segments on loopback, 2 req/s",
            expected: "network",
            run: loss,
        },
        Case {
            name: "llamacpp-kv-exhausted",
            mechanism: "llama-server, one KV pool of 1,024 tokens shared by 4 slots (--kv-unified), 1 -> 6 req/s of 128+256 tokens: the pool fills, decode finds no free cell at batch size 1 and every running request fails with \"Context size has been exceeded.\"",
            expected: "errors",
            run: kv_exhausted,
        },
        Case {
            name: "llamacpp-healthy-low",
            mechanism: "llama-server, 8 slots, 0.5 req/s of 32 tokens throughout",
            expected: "none",
            run: || healthy(0.5),
        },
        Case {
            name: "llamacpp-healthy-high",
            mechanism: "llama-server, 8 slots, 2 req/s of 32 tokens throughout",
            expected: "none",
            run: || healthy(2.0),
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
    let server = start(cfg);
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

fn queue() -> Value {
    run("llama-queue", &Config::slots(2), &llm(1.0, 8.0, 64))
}

fn healthy(rps: f64) -> Value {
    run("llama-healthy", &Config::slots(8), &llm(rps, rps, 32))
}

/// 4 slots decoding 128-token prompts into 256-token answers need up to 1,536 cells; the one
/// pool has 1,024. llama.cpp (tools/server/server-context.cpp, the decode loop) first evicts
/// idle slots' cached prompts and halves the batch; when a batch of one still finds no free
/// cell it fails every processing slot with "Context size has been exceeded." and clears them.
/// It has no preemption and no swap: KV exhaustion is an error, not a wait.
fn kv_exhausted() -> Value {
    let cfg = Config {
        slots: 4,
        ctx: 1024,
        unified: true,
        threads: 1,
    };
    run("llama-kv", &cfg, &llm(1.0, 6.0, 256))
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
    let deadline = std::time::Instant::now() + Duration::from_mins(1);
    while server.metric("tokens_predicted_total").unwrap_or(0.0) <= 0.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no request reached llama-server"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(BASELINE);
    (server, stress)
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

fn loss() -> Value {
    let (server, stress) = past_baseline("llama-loss", 2.0);
    let loss = RandomLoss::from_port(server.addr.port(), 10);
    std::thread::sleep(PEAK);
    drop(loss);
    let r = stress.finish_with_report();
    drop(server);
    r
}

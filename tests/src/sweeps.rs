//! Faults at several strengths (how weak a fault can be and still be found) and two faults at
//! once, for `cargo xtask bench attribution`.

use std::time::Duration;

use serde_json::Value;

use crate::{
    NetNs, Sim,
    cases::{Case, KV_PRESSURE_SIM, cpu_quota, kv_pressure_load, llm, loss_loopback},
    explain::{BASELINE, FIRST, PEAK, Stress, run, scenario},
};

/// One fault at several strengths, strongest first.
pub struct Sweep {
    /// The verdict every strength should get.
    pub expected: &'static str,
    /// What is turned, in words.
    pub knob: &'static str,
    /// One case per strength, strongest first; each case's mechanism is its strength.
    pub steps: Vec<Case>,
}

/// The sweeps: random loss, a CPU quota and admission slots.
#[must_use]
pub fn all() -> Vec<Sweep> {
    vec![
        Sweep {
            expected: "network",
            knob: "the healthy sim's segments dropped on loopback during the peak, 4 req/s",
            steps: vec![
                step("loss-10%", "10%", "network", || loss_loopback(10)),
                step("loss-3%", "3%", "network", || loss_loopback(3)),
                step("loss-1%", "1%", "network", || loss_loopback(1)),
            ],
        },
        Sweep {
            expected: "cpu_runqueue",
            knob: "the healthy sim's cgroup-v1 CPU quota during the peak, 8 req/s",
            steps: vec![
                step("cpu-quota-10%", "10%", "cpu_runqueue", || cpu_quota(10)),
                step("cpu-quota-20%", "20%", "cpu_runqueue", || cpu_quota(20)),
                step("cpu-quota-50%", "50%", "cpu_runqueue", || cpu_quota(50)),
            ],
        },
        Sweep {
            expected: "queue",
            knob: "the sim's admission slots (max_num_seqs), 2 -> 12 req/s of 256 tokens",
            steps: vec![
                step("slots-4", "4", "queue", || slots("4")),
                step("slots-8", "8", "queue", || slots("8")),
                step("slots-16", "16", "queue", || slots("16")),
            ],
        },
    ]
}

/// A sweep's case: `mechanism` is its strength.
fn step(
    name: &'static str,
    strength: &'static str,
    expected: &'static str,
    run: fn() -> Value,
) -> Case {
    Case {
        name,
        mechanism: strength,
        expected,
        run,
    }
}

/// The healthy sim admitting `n` sequences at once under the queue case's load.
fn slots(n: &str) -> Value {
    run(
        "slots",
        "healthy",
        &["--max-num-seqs", n],
        &llm(2.0, 12.0, 256),
    )
}

/// The expected verdict of [`double_fault`]: both causes named.
pub const DOUBLE_FAULT: &str = "kv_cache+network";

/// KV pressure (the kv-pressure case) and, from the peak on, the link to the sim (in a network
/// namespace) shaped to 6 Mbit/s, a little under what the peak's answers need: the server's queue and the answers'
/// transit both grow. (Random loss on loopback is recovered within an RTT: it adds too little
/// to a request's time for a part of the rise.)
#[must_use]
pub fn double_fault() -> Case {
    Case {
        name: "kv-pressure+slow-link",
        mechanism: "sim in a netns, KV cache of 256 blocks, 2 -> 16 req/s of 384 tokens, and its veth shaped to 6 Mbit/s during the peak",
        expected: DOUBLE_FAULT,
        run: kv_and_slow_link,
    }
}

fn kv_and_slow_link() -> Value {
    let ns = NetNs::create_in("kvlink", [10, 213, 27]);
    let addr = std::net::SocketAddr::from(([10, 213, 27, 2], 8000));
    let sim = Sim::start(
        &[
            "ip",
            "netns",
            "exec",
            &ns.name,
            "nice",
            "-n",
            &FIRST.to_string(),
        ],
        "kv-pressure",
        addr,
        &KV_PRESSURE_SIM,
    );
    let pid = sim.pid().to_string();
    let stress = Stress::start(
        "kvlink",
        &scenario("kvlink", &sim.url(), &kv_pressure_load()),
        None,
        FIRST,
        &["--allow-remote", "--pid", &pid],
    );
    sim.wait_for_load(Duration::from_mins(1));
    std::thread::sleep(BASELINE);
    ns.shape("6mbit");
    std::thread::sleep(PEAK);
    let r = stress.finish();
    drop(sim);
    drop(ns);
    r
}

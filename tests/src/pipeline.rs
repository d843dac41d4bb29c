//! A RAG pipeline of separate processes for the hop tests: the stdlib gateway
//! (`tests/servers/rag_gateway.py`) in front of three sims, one per hop (`embed`, also the
//! re-ranker; `search`, the vector index; `chat`, the LLM), explained with one `--service` per
//! hop.

use std::{net::SocketAddr, path::PathBuf, process::Child, time::Duration};

use serde_json::Value;

use crate::{
    Sim,
    cases::{Case, KV_PRESSURE_SIM, kv_pressure_load, llm},
    explain::{FIRST, Load, PEAK, SECOND, Stress, loopback, scenario},
    http_get, http_post_json,
};

/// The gateway process, killed when dropped.
pub struct RagGateway {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl RagGateway {
    /// Starts the gateway under `prefix` (`["nice", "-n", "-5"]`) on a free loopback port,
    /// calling `embed`, `search`, `rerank` and `chat`; waits until it answers.
    #[must_use]
    pub fn start(prefix: &[&str], embed: &str, search: &str, rerank: &str, chat: &str) -> Self {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("servers/rag_gateway.py");
        let addr = loopback();
        let child = std::process::Command::new(prefix[0])
            .args(&prefix[1..])
            .arg("python3")
            .arg(&script)
            .args(["--port", &addr.port().to_string()])
            .args(["--embed", embed, "--rerank", rerank, "--search", search])
            .args(["--chat", chat])
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", script.display()));
        let me = Self { child, addr };
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while http_get(addr, "/health").is_none() {
            assert!(
                std::time::Instant::now() < deadline,
                "the gateway did not answer on {addr}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        // One request through every hop: the sims build their vector indexes at start, which
        // takes a debug build a while on a busy machine.
        let warm = r#"{"model": "inferscope-sim", "max_tokens": 4, "stream": true,
            "messages": [{"role": "user", "content": "warm up"}]}"#;
        let deadline = std::time::Instant::now() + Duration::from_mins(2);
        while !http_post_json(addr, "/v1/chat/completions", warm)
            .is_some_and(|body| body.contains("[DONE]"))
        {
            assert!(
                std::time::Instant::now() < deadline,
                "no answer through the gateway on {addr} within 120 s"
            );
            std::thread::sleep(Duration::from_millis(500));
        }
        me
    }

    /// Base URL.
    #[must_use]
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request from now on holds the gateway's global lock for `ms`.
    pub fn lock(&self, ms: u32) {
        let body = format!("{{\"ms\": {ms}}}");
        assert!(
            http_post_json(self.addr, "/admin/lock", &body).is_some(),
            "the gateway did not take the lock"
        );
    }

    /// `GET /stats`: its requests and the calls it made per upstream.
    #[must_use]
    pub fn stats(&self) -> Value {
        http_get(self.addr, "/stats")
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or(Value::Null)
    }
}

impl Drop for RagGateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fault on one hop, started when the peak starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HopFault {
    /// Nothing: a healthy pipeline.
    None,
    /// The vector index rebuilt over and over during the peak (`search`).
    IndexRebuild,
    /// The LLM's KV cache too small for the peak (`chat`).
    KvPressure,
    /// The gateway holds a global lock for this many ms per request during the peak (its own
    /// time: `orchestration`).
    GatewayLock(u32),
    /// The re-ranker's cgroup gets this share of a CPU (%) during the peak (`rerank`).
    RerankCpuQuota(u32),
}

/// The gateway and its four sims, one process a hop, all under one `prefix`.
pub struct Chain {
    pub embed: Sim,
    pub search: Sim,
    /// A process of its own, so that a fault on it is on this hop alone.
    pub rerank: Sim,
    pub chat: Sim,
    pub gateway: RagGateway,
}

impl Chain {
    /// Starts the four sims (the chat hop with the KV cache of [`KV_PRESSURE_SIM`] when
    /// `kv_pressure`) and the gateway in front of them, each under `prefix`.
    #[must_use]
    pub fn start(prefix: &[&str], kv_pressure: bool) -> Self {
        let embed = Sim::start(prefix, "healthy", loopback(), &[]);
        let search = Sim::start(prefix, "healthy", loopback(), &[]);
        let rerank = Sim::start(prefix, "healthy", loopback(), &["--rerank-on-cpu"]);
        let chat = if kv_pressure {
            Sim::start(prefix, "kv-pressure", loopback(), &KV_PRESSURE_SIM)
        } else {
            Sim::start(prefix, "healthy", loopback(), &[])
        };
        let gateway = RagGateway::start(
            prefix,
            &embed.url(),
            &search.url(),
            &rerank.url(),
            &chat.url(),
        );
        Self {
            embed,
            search,
            rerank,
            chat,
            gateway,
        }
    }

    /// Each hop's name and listening port.
    #[must_use]
    pub fn hops(&self) -> [(&'static str, u16); 4] {
        [
            ("embed", self.embed.addr.port()),
            ("search", self.search.addr.port()),
            ("rerank", self.rerank.addr.port()),
            ("chat", self.chat.addr.port()),
        ]
    }
}

/// Runs the pipeline under `load` with `fault`; returns report.json.
#[must_use]
pub fn run(name: &str, fault: HopFault, load: &Load) -> Value {
    // The servers one step below the generator, which shares the two CPUs with them.
    let nice = ["nice", "-n", &SECOND.to_string()];
    let chain = Chain::start(&nice, fault == HopFault::KvPressure);
    let gateway = &chain.gateway;
    let flags: Vec<String> = chain
        .hops()
        .iter()
        .flat_map(|(n, port)| ["--service".to_owned(), format!("{n}={port}")])
        .collect();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    // The gateway has no /metrics: its verdict rests on the kernel and the client.
    let mut extra = vec!["--metrics-url", "http://127.0.0.1:9/metrics"];
    extra.extend(&flags);
    let warmed = gateway.stats()["requests"].as_u64().unwrap_or(0);
    let stress = Stress::start(
        name,
        &scenario(name, &gateway.url(), load),
        None,
        FIRST,
        &extra,
    );
    // The load starts with the first request after the warm-up.
    let deadline = std::time::Instant::now() + Duration::from_mins(1);
    while gateway.stats()["requests"].as_u64().unwrap_or(0) <= warmed {
        assert!(
            std::time::Instant::now() < deadline,
            "no load reached the gateway"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(crate::explain::BASELINE);
    if let HopFault::RerankCpuQuota(percent) = fault {
        let group = crate::faults::CpuQuota::holding(chain.rerank.pid());
        group.limit(percent);
        std::thread::sleep(PEAK);
        drop(group);
    }
    if let HopFault::GatewayLock(ms) = fault {
        gateway.lock(ms);
        std::thread::sleep(PEAK);
        gateway.lock(0);
    }
    if fault == HopFault::IndexRebuild {
        let addr = chain.search.addr;
        let until = std::time::Instant::now() + PEAK;
        while std::time::Instant::now() < until {
            // A rebuild takes at least 2 s; the next starts as it ends.
            let _ = http_post_json(addr, "/v1/vector/rebuild", "{}");
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    stress.finish()
}

/// The pipeline cases of `cargo xtask bench attribution` (`tests/tests/it/pipeline_e2e.rs`
/// asserts the same): the verdict is the hop holding the peak's rise and the cause inside it.
#[must_use]
pub fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "pipeline-index-rebuild",
            mechanism: "gateway -> embed, search, rerank, chat (4 sims); the search hop's index rebuilt over the peak, 4 req/s",
            expected: "search:vector_index",
            run: || run("hopsearch", HopFault::IndexRebuild, &llm(4.0, 4.0, 32)),
        },
        Case {
            name: "pipeline-kv-pressure",
            mechanism: "the same chain; the chat hop with 256 KV blocks, 2 -> 16 req/s of 384 tokens",
            expected: "chat:kv_cache",
            run: || run("hopkv", HopFault::KvPressure, &kv_pressure_load()),
        },
        Case {
            name: "pipeline-rerank-quota",
            mechanism: "the same chain; the re-ranker (on CPUs) given 3% of a CPU during the peak, 4 req/s",
            expected: "rerank:cpu_runqueue",
            run: || run("hopquota", HopFault::RerankCpuQuota(3), &llm(4.0, 4.0, 32)),
        },
        Case {
            name: "pipeline-gateway-lock",
            mechanism: "the same chain; the gateway holds a global lock 150 ms per request during the peak, 2 -> 4 req/s",
            expected: "orchestration",
            run: || run("hoplock", HopFault::GatewayLock(150), &llm(2.0, 4.0, 32)),
        },
        Case {
            name: "pipeline-healthy",
            mechanism: "the same chain, healthy, 2 -> 4 req/s",
            expected: "none",
            run: || run("hopnone", HopFault::None, &llm(2.0, 4.0, 32)),
        },
    ]
}

//! Client-orchestrated pipelines (`request.pipeline`, no root needed): `inferscope stress`
//! runs embed -> search -> rerank -> chat -> tools against three sim processes, and the
//! report's per-step counts, tool-call depth and fallbacks match what the sims counted
//! (`inferscope_sim_*_total`, `vllm:request_success_total`). A step against a dead port and
//! a step past its deadline take their fallbacks, and the counts say so; a step that fails
//! without one fails its task. Exported over OTLP to a collector, the orchestration metrics
//! (`inferscope.pipeline.tool_depth`, `.step.calls`, `.step.fallbacks` by step) say the same.

use std::{net::SocketAddr, process::Command};

use inferscope_tests::{Sim, collector::Collector, free_port, http_get, inferscope_bin, machine};
use serde_json::Value;

/// A counter of the sim on `addr` (summed over its label sets).
fn counter(addr: SocketAddr, name: &str) -> u64 {
    let text = http_get(addr, "/metrics").expect("the sim answers /metrics");
    text.lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter(|l| l[name.len()..].starts_with([' ', '{']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_port()))
}

/// Runs `inferscope stress` on `yaml`, its requests exported to `collector`; its report.json
/// and terminal output.
fn stress(name: &str, yaml: &str, collector: &Collector) -> (Value, String) {
    let dir = std::env::temp_dir().join(format!("inferscope-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("scenario.yaml");
    std::fs::write(&file, yaml).unwrap();
    let out_file = dir.join("report.json");
    let out = Command::new(inferscope_bin())
        .arg("stress")
        .arg(&file)
        .arg("--out")
        .arg(&out_file)
        .args(["--otlp-endpoint", &collector.endpoint()])
        .args(["--otlp-protocol", "http/protobuf"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let text = std::fs::read_to_string(&out_file).unwrap_or_else(|e| {
        panic!(
            "no report ({e}): {}\nstdout: {stdout}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (serde_json::from_str(&text).unwrap(), stdout)
}

/// The phase's pipeline step `kind`.
fn step<'a>(phase: &'a Value, kind: &str) -> &'a Value {
    phase["pipeline"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step"] == kind)
        .unwrap_or_else(|| panic!("no step {kind}: {}", phase["pipeline"]))
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// The tools step of `phase` against what the sims counted: A (`rag_at`) and C (`llm_at`) serve
/// the tool routes, C the chats.
fn assert_tool_rounds(phase: &Value, tasks: u64, rag_at: SocketAddr, llm_at: SocketAddr) {
    let (chat, tools) = (step(phase, "chat"), step(phase, "tools"));
    let called = counter(llm_at, "inferscope_sim_tool_calls_total");
    let depth = &phase["pipeline"]["tool_depth"];
    let at = |d: &str| depth.get(d).map_or(0, n);
    // The sim never calls a tool after a tool result: a chain is one round deep.
    assert_eq!(at("0") + at("1"), tasks, "{depth}");
    assert_eq!(at("1"), called, "{depth}");
    assert!(
        called > 0 && called < tasks,
        "about half the chats call a tool: {called} of {tasks}"
    );
    // Each tool call went to A's or C's tool route and was followed by one continuation chat.
    let results = counter(rag_at, "inferscope_sim_tool_results_total")
        + counter(llm_at, "inferscope_sim_tool_results_total");
    assert_eq!(results, called);
    assert_eq!(n(&tools["calls"]), results + called);
    assert_eq!(n(&tools["fallbacks"]), 0);
    // A chat answered without a tool call leaves the tools step nothing to do.
    assert_eq!(n(&tools["ran"]), called, "{tools}");
    assert_eq!(n(&tools["skipped"]), tasks - called, "{tools}");
    assert_eq!(
        counter(llm_at, "vllm:request_success_total"),
        n(&chat["calls"]) + called,
        "every chat request of the run"
    );
}

/// The orchestration metrics `collector` received of `phase` (`rag`, `tasks` tasks): one
/// tool-call depth per task, adding up to the tool calls the LLM (`llm_at`) made, and each
/// step's calls as the report counts them.
fn assert_orchestration_over_otlp(
    collector: &Collector,
    phase: &Value,
    tasks: u64,
    llm_at: SocketAddr,
) {
    let depth = collector
        .point("inferscope.pipeline.tool_depth", &[("phase", "rag")])
        .expect("no tool-call depth over OTLP");
    assert_eq!(n(&depth["count"]), tasks, "{depth}");
    assert_eq!(
        depth["sum"].as_f64().unwrap() as u64,
        counter(llm_at, "inferscope_sim_tool_calls_total"),
        "{depth}"
    );
    for one in ["embed", "search", "rerank", "chat", "tools"] {
        let calls = collector
            .point(
                "inferscope.pipeline.step.calls",
                &[("inferscope.step", one)],
            )
            .unwrap_or_else(|| panic!("no calls of {one} over OTLP"));
        assert_eq!(n(&calls["value"]), n(&step(phase, one)["calls"]), "{calls}");
    }
}

#[test]
fn pipeline_steps_tool_depth_and_calls_match_what_the_sims_counted() {
    let _machine = machine();
    let Some(collector) = Collector::start("pipeline_steps_tool_depth_and_calls") else {
        return;
    };
    let (rag_at, index_at, llm_at) = (loopback(), loopback(), loopback());
    // A: embeddings, re-ranking and the tools; B: the vector index; C: the LLM, which answers
    // about half of the first chats with a tool call.
    let retrieval = Sim::start(&[], "", rag_at, &[]);
    let index = Sim::start(&[], "", index_at, &[]);
    let llm = Sim::start(&[], "", llm_at, &["--tool-call-rate", "0.5"]);
    let yaml = format!(
        r#"name: pipeline-counts
target: http://{llm_at}
seed: 3
timeout: 30s
phases:
  - name: rag
    duration: 4s
    load: {{shape: constant, rate: 5}}
    request:
      prompt: "question ${{seq}}: why is ${{choice(kv, queue, index)}} slow?"
      check: {{regex: '\S'}}
      pipeline:
        steps:
          - {{kind: embed, url: "http://{rag_at}"}}
          - {{kind: search, url: "http://{index_at}", top_k: 6}}
          - {{kind: rerank, url: "http://{rag_at}", top_n: 3}}
          - {{kind: chat, prompt: "Context:\n${{docs}}\n\nQuestion: ${{query}}", max_tokens: 64}}
          - {{kind: tools, max_depth: 2, endpoints: {{lookup: "http://{rag_at}/v1/tools/lookup", calc: /v1/tools/calc}}, fallback: skip}}
"#
    );
    let (report, stdout) = stress("pipeline-counts", &yaml, &collector);
    let phase = &report["phases"][0];
    println!("{stdout}\n{}", phase["pipeline"]);
    assert_eq!(phase["endpoint"], "pipeline");
    let tasks = n(&phase["pipeline"]["tasks"]);
    assert!(tasks >= 15, "{tasks} tasks of 20 scheduled");
    assert_eq!(n(&phase["tasks"]), tasks);
    assert_eq!(n(&phase["tasks_succeeded"]), tasks, "every task answered");
    // The tools step's endpoints are paths under its own url: the chat's service (C).
    let (embed, search, rerank, chat) = (
        step(phase, "embed"),
        step(phase, "search"),
        step(phase, "rerank"),
        step(phase, "chat"),
    );
    for one in [embed, search, rerank, chat] {
        assert_eq!(n(&one["ran"]), tasks, "{one}");
        assert_eq!(n(&one["ok"]), tasks, "{one}");
        assert_eq!(n(&one["fallbacks"]), 0, "{one}");
        assert_eq!(n(&one["calls"]), tasks, "{one}");
        let lat = &one["latency_ms"];
        assert!(lat["p50"].as_f64().unwrap() > 0.0 && lat["p999"].as_f64() >= lat["p50"].as_f64());
    }
    // What the servers received.
    assert_eq!(
        counter(rag_at, "inferscope_sim_embedding_requests_total"),
        n(&embed["calls"])
    );
    assert_eq!(
        counter(index_at, "inferscope_sim_vector_searches_total"),
        n(&search["calls"])
    );
    assert_eq!(
        counter(rag_at, "inferscope_sim_rerank_requests_total"),
        n(&rerank["calls"])
    );
    assert_tool_rounds(phase, tasks, rag_at, llm_at);
    assert_orchestration_over_otlp(&collector, phase, tasks, llm_at);
    // The final chat's TTFT, each step's share and the rest add up.
    assert_eq!(n(&phase["pipeline"]["final_chat_ttft_ms"]["count"]), tasks);
    let shares: f64 = phase["pipeline"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|one| one["share_of_e2e"].as_f64().unwrap())
        .sum::<f64>()
        + phase["pipeline"]["other_share_of_e2e"].as_f64().unwrap();
    assert!((shares - 1.0).abs() < 1e-6, "{shares}");
    assert!(
        stdout.contains("pipeline:") && stdout.contains("tool-call depth"),
        "{stdout}"
    );
    // The records: one per task, its steps in order.
    let rec = &report["records"][0];
    let kinds: Vec<&str> = rec["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|one| one["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["embed", "search", "rerank", "chat", "tools"]);
    drop((retrieval, index, llm));
}

#[test]
fn fallbacks_stand_in_for_a_dead_service_and_a_passed_deadline() {
    let _machine = machine();
    let Some(collector) = Collector::start("fallbacks_stand_in") else {
        return;
    };
    let (rag_at, llm_at) = (loopback(), loopback());
    let dead = loopback();
    let retrieval = Sim::start(&[], "", rag_at, &[]);
    // The fixed profile answers its first token after 100 ms: past a 30 ms deadline.
    let llm = Sim::start(&[], "fixed", llm_at, &[]);
    let yaml = format!(
        r#"name: pipeline-fallbacks
target: http://{llm_at}
seed: 5
timeout: 20s
phases:
  - name: degraded
    duration: 3s
    load: {{shape: constant, rate: 4}}
    request:
      pipeline:
        steps:
          - {{kind: embed, url: "http://{rag_at}"}}
          - {{kind: search, url: "http://{rag_at}", top_k: 4}}
          - {{kind: rerank, url: "http://{dead}", fallback: skip}}
          - {{kind: chat, max_tokens: 8, deadline: 30ms, fallback: {{default: "busy, try later"}}}}
  - name: broken
    duration: 2s
    load: {{shape: constant, rate: 4}}
    request:
      pipeline:
        steps:
          - {{kind: search, url: "http://{dead}"}}
          - {{kind: chat, max_tokens: 8}}
"#
    );
    let (report, stdout) = stress("pipeline-fallbacks", &yaml, &collector);
    println!("{stdout}");
    let phase = &report["phases"][0];
    let tasks = n(&phase["pipeline"]["tasks"]);
    assert!(tasks >= 8, "{tasks}");
    let rerank = step(phase, "rerank");
    assert_eq!(n(&rerank["fallbacks"]), tasks, "{rerank}");
    assert!((rerank["fallback_rate"].as_f64().unwrap() - 1.0).abs() < 1e-12);
    assert_eq!(counter(rag_at, "inferscope_sim_rerank_requests_total"), 0);
    let chat = step(phase, "chat");
    assert_eq!(n(&chat["fallbacks"]), tasks, "{chat}");
    // A deadline cuts the step at its deadline, not at the answer's end.
    assert!(chat["latency_ms"]["p99"].as_f64().unwrap() < 90.0, "{chat}");
    // The fallbacks kept every task alive.
    assert_eq!(n(&phase["tasks_succeeded"]), tasks);
    assert_eq!(n(&step(phase, "search")["ok"]), tasks);
    let rec = report["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["phase"] == 0)
        .unwrap();
    assert_eq!(rec["steps"][2]["outcome"], "fallback");
    assert_eq!(rec["steps"][2]["error"], "connect");
    assert_eq!(rec["steps"][3]["error"], "timeout");
    // Without a fallback the step fails its task, and the steps after it do not run.
    let broken_phase = &report["phases"][1];
    let broken = n(&broken_phase["pipeline"]["tasks"]);
    assert!(broken >= 4, "{broken}");
    assert_eq!(n(&step(broken_phase, "search")["failed"]), broken);
    assert_eq!(n(&broken_phase["tasks_succeeded"]), 0);
    assert!(
        broken_phase["pipeline"]["steps"]
            .as_array()
            .unwrap()
            .iter()
            .all(|one| one["step"] != "chat"),
        "{}",
        broken_phase["pipeline"]
    );
    assert_eq!(n(&broken_phase["counts"]["errors"]["connect"]), broken);
    // Over OTLP: the degraded phase's fallbacks by step, none of the broken one's.
    let fallbacks = |phase: &str, one: &str| {
        collector
            .point(
                "inferscope.pipeline.step.fallbacks",
                &[("phase", phase), ("inferscope.step", one)],
            )
            .map(|p| n(&p["value"]))
    };
    assert_eq!(fallbacks("degraded", "rerank"), Some(tasks));
    assert_eq!(fallbacks("degraded", "chat"), Some(tasks));
    assert_eq!(fallbacks("degraded", "search"), None);
    assert_eq!(fallbacks("broken", "search"), None);
    drop((retrieval, llm));
}

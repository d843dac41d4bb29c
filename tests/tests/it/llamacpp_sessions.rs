//! Agentic sessions (`request.session`) against a production engine: llama.cpp's
//! `llama-server` with 4 slots and the random-weight model `cargo xtask setup` builds. One user
//! runs one session at a time, so only its sub-agents can overlap: the server's own average of
//! busy slots per decode says whether they did. Per session the parts add up to its end-to-end
//! time with little left for the client, and every call's context grows by what the plan adds.
//! Needs the engine built by setup (and takes the machine, as the other engine tests do).

use std::{collections::BTreeMap, net::SocketAddr, process::Command};

use inferscope_tests::{
    engine::{self, Config, LlamaServer, MODEL},
    free_port, inferscope_bin, root_or_skip,
};
use serde_json::Value;

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

#[test]
fn sessions_on_llama_server_add_up_grow_their_context_and_overlap_their_sub_agents() {
    let name = "llamacpp-sessions";
    let Some(_machine) = root_or_skip(name) else {
        return;
    };
    if !engine::built_or_skip(name) {
        return;
    }
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let server = LlamaServer::start(&[], addr, &Config::slots(4));
    let yaml = format!(
        "name: {name}
target: {url}
seed: 5
timeout: 60s
phases:
  - name: agents
    duration: 20s
    load: {{shape: concurrency, users: 1}}
    request:
      model: {MODEL}
      max_tokens: 8
      ignore_eos: true
      session:
        system_prompt_tokens: 40
        task_tokens: 20
        steps:
          - llm: {{}}
          - tool: {{name: search, wait: 100ms, result_tokens: 40}}
          - llm: {{}}
          - agents:
              count: 3
              task_tokens: 10
              steps:
                - llm: {{}}
                - tool: {{wait: 50ms, result_tokens: 20}}
                - llm: {{}}
          - think: 50ms
          - llm: {{}}
",
        url = server.url()
    );
    let dir = std::env::temp_dir().join(format!("inferscope-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (file, out_file) = (dir.join("scenario.yaml"), dir.join("report.json"));
    std::fs::write(&file, yaml).unwrap();
    let out = Command::new(inferscope_bin())
        .arg("stress")
        .arg(&file)
        .arg("--out")
        .arg(&out_file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap_or_else(|e| {
            panic!(
                "no report ({e}): {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        }))
        .unwrap();
    let phase = &report["phases"][0];
    let v = &phase["sessions"];
    assert!(n(&v["completed"]) >= 3 && n(&v["failed"]) == 0, "{v}");
    assert!(
        phase["counts"]["errors"].as_object().unwrap().is_empty(),
        "{}",
        phase["counts"]
    );
    assert!(
        stdout.contains("  sessions: ") && stdout.contains("time: model "),
        "{stdout}"
    );
    // The server decoded the sub-agents together: one session at a time, so a decode had
    // more than one busy slot only when sub-agents overlapped.
    let busy = server
        .metric("n_busy_slots_per_decode")
        .expect("llama-server's metrics");
    println!("llama-server: {busy:.2} busy slots per decode");
    assert!(busy > 1.2, "busy slots per decode {busy}");
    let records = report["records"].as_array().unwrap();
    for s in v["records"].as_array().unwrap() {
        if s["outcome"] == "completed" {
            check_session(s, records);
        }
    }
}

/// A completed session's time adds up and its agents' contexts grow by what they were given.
fn check_session(s: &Value, records: &[Value]) {
    let p = &s["parts"];
    let part = |k: &str| n(&p[k]);
    let e2e = n(&s["end_us"]) - n(&s["intended_us"]);
    let sum = part("model_us") + part("tools_us") + part("think_us") + part("client_us");
    assert_eq!(sum, e2e, "{s}");
    assert!((150_000..200_000).contains(&part("tools_us")), "{s}");
    assert!((50_000..100_000).contains(&part("think_us")), "{s}");
    assert!(part("client_us") * 10 < e2e, "{s}");
    // Calls by agent, in order.
    let mut by: BTreeMap<u64, Vec<&Value>> = BTreeMap::new();
    for r in records.iter().filter(|r| r["session"]["id"] == s["id"]) {
        by.entry(n(&r["session"]["agent"])).or_default().push(r);
    }
    for calls in by.values_mut() {
        calls.sort_by_key(|r| n(&r["turn"]));
    }
    assert_eq!(by.len(), 4, "{s}");
    let ctx = |r: &Value| n(&r["session"]["context_tokens"]);
    let out = |r: &Value| n(&r["output_tokens"]);
    let main = &by[&0];
    let joined: u64 = by.range(1..).map(|(_, c)| out(c[c.len() - 1])).sum();
    let c: Vec<u64> = main.iter().map(|r| ctx(r)).collect();
    let want1 = 60 + out(main[0]) + 40;
    let want2 = want1 + out(main[1]) + joined;
    assert_eq!(c, [60, want1, want2], "{s}");
    for (_, sub) in by.range(1..) {
        assert_eq!(ctx(sub[0]), 50);
        assert_eq!(ctx(sub[1]), 50 + out(sub[0]) + 20);
    }
    // The server's prompt grows along the main agent's turns too.
    let sent_tokens: Vec<u64> = main.iter().map(|r| n(&r["input_tokens"])).collect();
    assert!(
        sent_tokens.windows(2).all(|w| w[0] < w[1]),
        "{sent_tokens:?}"
    );
}

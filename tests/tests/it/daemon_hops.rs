//! The node daemon names the hop holding a gateway's rise: the RAG gateway (`tests/servers/
//! rag_gateway.py`, no metrics) in front of four sims, all five watched by `inferscope daemon`
//! with nothing told about how they are chained, and an external generator (Python
//! `http.client`) that marks its phases. The chat sim's KV cache is too small for the peak:
//! the kernel sees the gateway's answers slow down and the chat server's answers to the
//! gateway's calls slow down with them, so the gateway's peak is held by the chat hop, whose
//! own verdict is `kv_cache`: on `/metrics` while the peak runs, on `/api/v1/verdicts` and in
//! the peak's report. The kernel's view of the gateway's orchestration: it calls each of the
//! four once per request it answers (`inferscope_hop_calls_per_request` on `/metrics`, and
//! summed over its windows on `/api/v1/verdicts`).
use std::time::{Duration, Instant};

use inferscope_tests::{
    daemon::{Daemon, generator},
    explain::FIRST,
    pipeline::Chain,
    root_or_skip,
};
use serde_json::Value;

#[test]
fn the_daemon_names_the_hop_holding_a_gateways_rise() {
    let Some(_machine) = root_or_skip("the_daemon_names_the_hop_holding_a_gateways_rise") else {
        return;
    };
    let nice = ["nice", "-n", &FIRST.to_string()];
    let chain = Chain::start(&nice, true);
    let (gateway, chat) = (&chain.gateway, &chain.chat);
    let ports: Vec<String> = chain
        .hops()
        .into_iter()
        .map(|(_, p)| p)
        .chain([gateway.addr.port()])
        .map(|p| p.to_string())
        .collect();
    let mut args = Vec::new();
    for p in &ports {
        args.extend(["--port", p.as_str()]);
    }
    let d = Daemon::start(&args);
    let (g, c) = (
        format!("port:{}", gateway.addr.port()),
        format!("port:{}", chat.addr.port()),
    );
    let mut load = generator(
        &gateway.url(),
        &d,
        &["warmup:3:2", "baseline:8:2", "peak:12:16", "cooldown:3:2"],
        &["--output-tokens", "384"],
    );
    // `/metrics` while the peak runs: the gateway's newest window held by the chat hop.
    let holds = format!("inferscope_hop_holds{{server=\"{g}\",hop=\"{c}\"}} 1\n");
    let calls = format!("inferscope_hop_calls_per_request{{server=\"{g}\",hop=\"{c}\"}} ");
    let (mut seen, mut calls_seen) = (false, Vec::new());
    let deadline = Instant::now() + Duration::from_mins(2);
    while load.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the generator did not finish");
        let metrics = d.get("/metrics");
        seen |= metrics.contains(&holds);
        calls_seen.extend(
            metrics
                .lines()
                .filter_map(|l| l.strip_prefix(calls.as_str())?.parse::<f64>().ok()),
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(
        !calls_seen.is_empty(),
        "/metrics never showed {calls}...:\n{}",
        d.get("/metrics")
    );
    let out = load.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the generator failed: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let report: Value =
        serde_json::from_str(&d.get(&format!("/api/v1/report?phase=peak&server={g}"))).unwrap();
    let peak = report["phases"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == "peak"))
        .unwrap_or_else(|| panic!("no peak phase: {report:#}"));
    let hops = &peak["hops"];
    assert_eq!(hops["holder"], c.as_str(), "{hops:#}\n{}", d.log());
    let chat_part = hops["parts"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["hop"] == c.as_str()))
        .unwrap_or_else(|| panic!("no part of {c}: {hops:#}"));
    assert_eq!(chat_part["cause"], "kv_cache", "{hops:#}");
    assert!(seen, "/metrics never showed {holds}");
    // The verdicts list carries each gateway window's split.
    let verdicts: Value = serde_json::from_str(&d.get("/api/v1/verdicts?limit=40")).unwrap();
    let held = verdicts
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["server"]["server"] == g.as_str())
        .any(|v| v["hops"]["holder"] == c.as_str());
    assert!(held, "no gateway verdict held by {c}: {verdicts:#}");
    calls_once_per_request(&verdicts, &g, &ports[..4]);
    d.stop();
}

/// Over the gateway's windows on `/api/v1/verdicts`, it asked each server it called (`hops`:
/// their ports) for one exchange per request it answered, within 15% (a request and its
/// calls can close in neighbouring windows; the daemon's own probe of the gateway's port for
/// metrics is an answer without calls).
fn calls_once_per_request(verdicts: &Value, gateway: &str, hops: &[String]) {
    let windows: Vec<&Value> = verdicts
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["server"]["server"] == gateway && v["orchestration"].is_object())
        .collect();
    let requests: f64 = windows
        .iter()
        .filter_map(|v| v["orchestration"]["requests"].as_f64())
        .sum();
    assert!(requests > 50.0, "{requests} requests in {windows:#?}");
    for hop in hops {
        let name = format!("port:{hop}");
        let calls: f64 = windows
            .iter()
            .flat_map(|v| v["orchestration"]["calls"].as_array().into_iter().flatten())
            .filter(|c| c["hop"] == name.as_str())
            .filter_map(|c| c["calls"].as_f64())
            .sum();
        let per = calls / requests;
        println!("{gateway} -> {name}: {calls} calls for {requests} requests ({per:.2} each)");
        assert!(
            (0.85..=1.15).contains(&per),
            "{gateway} -> {name}: {per:.2} calls per request"
        );
    }
}

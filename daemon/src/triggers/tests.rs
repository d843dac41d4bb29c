//! The engine on synthetic window sequences.
#![allow(clippy::float_cmp)]

use super::*;
use crate::attribute::Cause;
use crate::collect::timeline::{LoadSignals, Quantiles, ServerSignals};

/// `stress --explain`'s one server.
fn target() -> ServerIdentity {
    ServerIdentity::of(&crate::collect::identity::ServerKey::Target)
}

fn verdict(index: usize, cause: Cause) -> WindowVerdict {
    WindowVerdict {
        index,
        start_unix_ms: index as u64 * 1000,
        phase: None,
        verdict: Verdict::bare(cause, 0.9),
        hops: None,
        orchestration: None,
    }
}

/// Window `i` (1 s) with client TTFT p95 and error rate, and the server's KV usage.
fn window(i: usize, ttft_p95: f64, errors_of_100: u64, kv: f64) -> Window {
    Window {
        start_unix_ms: i as u64 * 1000,
        len_ms: 1000,
        load: Some(LoadSignals {
            requests: 100,
            errors: errors_of_100,
            ttft_ms: Some(Quantiles {
                p50: ttft_p95 / 2.0,
                p95: ttft_p95,
                p99: ttft_p95,
                max: ttft_p95,
            }),
            ..LoadSignals::default()
        }),
        server: Some(ServerSignals {
            kv_usage: Some(kv),
            ..ServerSignals::default()
        }),
        ..Window::default()
    }
}

fn rules(yaml: &str) -> Vec<Rule> {
    parse_yaml(yaml, "t.yaml").unwrap()
}

/// The seed's rule with a 5 s hold and a 20 s cooldown.
const SEED: &str = "triggers:\n  - name: rollback\n    when: [ttft_p95 rises_by > 300ms, error_rate >= 5%]\n    for: 5s\n    cooldown: 20s\n    run: [/bin/true]\n";

/// Feeds windows (ttft p95, errors of 100, kv, cause); returns the indices that fired.
fn run(engine: &mut Engine, seq: &[(f64, u64, f64, Cause)]) -> Vec<usize> {
    seq.iter()
        .enumerate()
        .filter_map(|(i, &(t, e, kv, cause))| {
            let fired = engine.observe(&target(), &window(i, t, e, kv), &verdict(i, cause));
            (!fired.is_empty()).then_some(i)
        })
        .collect()
}

fn healthy(n: usize) -> Vec<(f64, u64, f64, Cause)> {
    (0..n)
        .map(|i| (100.0 + (i % 7) as f64 * 5.0, i as u64 % 3, 0.3, Cause::None))
        .collect()
}

#[test]
fn the_seed_rule_fires_once_per_episode_after_its_hold() {
    let mut e = Engine::new(rules(SEED));
    let mut seq = healthy(12);
    // Episode 1: TTFT p95 +500 ms and 8% errors for 8 windows.
    seq.extend((0..8).map(|_| (620.0, 8, 0.9, Cause::KvCache)));
    seq.extend(healthy(25));
    // Episode 2, long after the cooldown.
    seq.extend((0..6).map(|_| (700.0, 10, 0.9, Cause::KvCache)));
    seq.extend(healthy(3));
    // Fires at the end of the 5th window of each episode.
    assert_eq!(run(&mut e, &seq), [16, 49]);
}

#[test]
fn the_seed_rule_never_fires_on_a_healthy_run_or_half_an_episode() {
    let mut e = Engine::new(rules(SEED));
    let mut seq = healthy(40);
    // Latency rises without errors, then errors without a latency rise: neither alone.
    seq.extend((0..10).map(|_| (800.0, 0, 0.9, Cause::KvCache)));
    seq.extend((0..10).map(|_| (110.0, 20, 0.3, Cause::Errors)));
    // Both, but a 300 ms rise exactly (not > 300 ms), and for 4 s only.
    seq.extend((0..10).map(|_| (410.0, 9, 0.3, Cause::Errors)));
    seq.extend((0..4).map(|_| (900.0, 9, 0.3, Cause::Errors)));
    seq.extend(healthy(5));
    assert!(run(&mut e, &seq).is_empty());
}

#[test]
fn cooldown_holds_back_a_second_episode() {
    let mut e = Engine::new(rules(SEED));
    let mut seq = healthy(10);
    seq.extend((0..5).map(|_| (900.0, 9, 0.9, Cause::KvCache))); // fires at 14 (end 15 s)
    seq.extend(healthy(2));
    // A second episode from 17 reaches its hold at 21, inside the cooldown (until 35 s),
    // and ends at 26: it never fires.
    seq.extend((0..10).map(|_| (900.0, 9, 0.9, Cause::KvCache)));
    seq.extend(healthy(2));
    // A third episode from 29 lasts past the end of the cooldown: fires at 34 (end 35 s).
    seq.extend((0..10).map(|_| (900.0, 9, 0.9, Cause::KvCache)));
    assert_eq!(run(&mut e, &seq), [14, 34]);
}

#[test]
fn a_firing_carries_values_baselines_and_the_verdict() {
    let mut e = Engine::new(rules(SEED));
    let mut fired = Vec::new();
    for (i, &(t, err, kv, cause)) in healthy(10)
        .iter()
        .chain(&[(650.0, 10, 0.95, Cause::KvCache); 5])
        .enumerate()
    {
        fired.extend(e.observe(&target(), &window(i, t, err, kv), &verdict(i, cause)));
    }
    assert_eq!(fired.len(), 1);
    let (rule, f) = &fired[0];
    assert_eq!(*rule, 0);
    assert_eq!(f.rule, "rollback");
    assert_eq!(f.window_start_unix_ms, 14_000);
    assert_eq!(f.values["ttft_p95_ms"], 650.0);
    assert_eq!(f.values["error_rate"], 0.1);
    assert_eq!(f.baselines["ttft_p95_ms"], 110.0);
    assert_eq!(f.verdict.cause, Cause::KvCache);
    assert_eq!(f.action, "run /bin/true");
    let body: serde_json::Value = serde_json::from_str(&f.json()).unwrap();
    assert_eq!(body["conditions"][1], "error_rate >= 5%");
    assert!(body.get("outcome").is_none());
}

#[test]
fn verdict_and_absolute_conditions() {
    let r = rules(
        "triggers:\n  - {name: kv, when: [verdict == kv_cache, kv_usage >= 95%], for: 3s, webhook: 'http://127.0.0.1:1/h'}\n",
    );
    let mut e = Engine::new(r);
    let mut seq = healthy(3);
    // KV full but another verdict; then the verdict without a full cache; then both.
    seq.extend((0..5).map(|_| (300.0, 0, 0.99, Cause::Queue)));
    seq.extend((0..5).map(|_| (300.0, 0, 0.80, Cause::KvCache)));
    seq.extend((0..5).map(|_| (300.0, 0, 0.99, Cause::KvCache)));
    assert_eq!(run(&mut e, &seq), [15]);
}

#[test]
fn a_window_without_the_metric_breaks_the_episode() {
    let mut e = Engine::new(rules(
        "triggers:\n  - {name: kv, when: [kv_usage >= 0.9], for: 3s, run: [/bin/true]}\n",
    ));
    let mut fired = Vec::new();
    for i in 0..8 {
        let mut w = window(i, 100.0, 0, 0.95);
        if i == 2 {
            w.server = None;
        }
        if !e
            .observe(&target(), &w, &verdict(i, Cause::KvCache))
            .is_empty()
        {
            fired.push(i);
        }
    }
    // 0-1 hold, 2 has no server metrics, 3-5 hold for 3 s.
    assert_eq!(fired, [5]);
}

#[test]
fn counts_render_as_prometheus_counters() {
    let r = rules(SEED);
    let c = Counts::new(&r);
    c.rules[0].1.fetch_add(2, Ordering::Relaxed);
    let text = crate::export::prometheus::trigger_counts(&c.get(), c.dropped());
    assert!(
        text.contains("inferscope_trigger_firings_total{rule=\"rollback\"} 2\n"),
        "{text}"
    );
    assert!(text.contains("# TYPE inferscope_trigger_firings_total counter"));
}

#[test]
fn files_are_checked_with_their_lines() {
    let e = parse_yaml(
        "triggers:\n  - name: a\n    when:\n      - kv_usage >= 0.9\n      - ttft_p95 300ms\n    run: [x]\n",
        "t.yaml",
    )
    .unwrap_err();
    assert_eq!(e.line, Some((5, 9)), "{e}");
    assert!(
        e.to_string()
            .starts_with("t.yaml:5:9: condition `ttft_p95 300ms`"),
        "{e}"
    );
    let e = parse_yaml("triggers:\n  - name: a\n    wen: []\n", "t.yaml").unwrap_err();
    assert!(e.to_string().contains("unknown field `wen`"), "{e}");
    assert_eq!(e.line.map(|l| l.0), Some(3));
    let e = parse_yaml("triggers: []\n", "t.yaml").unwrap_err();
    assert!(e.msg.contains("is empty"), "{e}");
    let remote =
        rules("triggers:\n  - {name: w, when: [kv_usage > 0.9], webhook: 'http://10.0.0.1/h'}\n");
    let e = check_remote(&remote, Reach::Loopback).unwrap_err();
    assert_eq!(
        (e.rule.as_str(), e.url.as_str()),
        ("w", "http://10.0.0.1/h")
    );
    assert!(e.to_string().contains("--allow-remote"), "{e}");
    check_remote(&remote, Reach::Anywhere).unwrap();
    let local = rules(
        "triggers:\n  - {name: w, when: [kv_usage > 0.9], webhook: 'http://localhost:9/h'}\n",
    );
    check_remote(&local, Reach::Loopback).unwrap();
    // Before anything starts, the guard that dials them judges every spelling by address.
    let hook = |url: &str| {
        rules(&format!(
            "triggers:\n  - {{name: w, when: [kv_usage > 0.9], webhook: '{url}'}}\n"
        ))
    };
    check_remote(&hook("http://0x7f000001:9/h"), Reach::Loopback).unwrap();
    for url in ["http://167772161/h", "http://[::ffff:10.0.0.1]/h"] {
        let e = check_remote(&hook(url), Reach::Loopback)
            .unwrap_err()
            .to_string();
        assert!(e.contains("refusing to connect") && e.contains(url), "{e}");
        check_remote(&hook(url), Reach::Anywhere).unwrap();
    }
}

#[tokio::test]
async fn the_observer_counts_and_the_runner_returns_outcomes() {
    let r =
        rules("triggers:\n  - {name: kv, when: [kv_usage >= 0.9], run: [/bin/sh, -c, 'exit 0']}\n");
    let started = start(Engine::new(r), None, Reach::Loopback);
    let mut observer = started.observer;
    for i in 0..4 {
        let kv = if i == 1 || i == 3 { 0.95 } else { 0.2 };
        observer(
            &target(),
            &window(i, 100.0, 0, kv),
            &verdict(i, Cause::None),
        );
    }
    assert_eq!(started.counts.get(), [("kv".to_owned(), 2)]);
    drop(observer);
    let firings = started.runner.await.unwrap();
    assert_eq!(firings.len(), 2);
    assert_eq!(firings[0].window_start_unix_ms, 1000);
    assert!(
        firings
            .iter()
            .all(|f| f.outcome.as_ref().is_some_and(Outcome::ok))
    );
}

#[test]
fn a_scenario_carries_its_rules_and_points_at_a_bad_one() {
    let base = "target: http://127.0.0.1:8000\nphases:\n  - name: p\n    duration: 1s\n    load: {shape: constant, rate: 1}\n";
    let good = format!(
        "{base}triggers:\n  - name: kv\n    when: [verdict == kv_cache]\n    for: 3s\n    run: [/bin/true]\n"
    );
    let plan = crate::loadgen::Plan::from_yaml(&good, "s.yaml", Path::new(".")).unwrap();
    let rules = super::of_scenario(plan.scenario()).unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0].hold, std::time::Duration::from_secs(3));
    let bad = format!(
        "{base}triggers:\n  - name: kv\n    when:\n      - kv_usage >= 0.9\n      - kv_usage is high\n    run: [/bin/true]\n"
    );
    let plan = crate::loadgen::Plan::from_yaml(&bad, "s.yaml", Path::new(".")).unwrap();
    let e = super::of_scenario(plan.scenario()).unwrap_err();
    assert_eq!(e.line.map(|l| l.0), Some(10), "{e}");
    assert!(e.msg.contains("condition `kv_usage is high`"), "{e}");
}

#[tokio::test]
async fn a_rule_fires_once_per_episode_of_each_server_with_its_identity() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("env");
    let yaml = format!(
        "triggers:\n  - name: kv\n    when: [verdict == kv_cache]\n    for: 2s\n    cooldown: 0s\n    run: [/bin/sh, -c, 'echo \"$INFERSCOPE_SERVER $INFERSCOPE_K8S_POD_NAME $INFERSCOPE_K8S_NAMESPACE_NAME\" >> {}']\n",
        out.display()
    );
    let started = start(Engine::new(rules(&yaml)), None, Reach::Loopback);
    let mut observer = started.observer;
    let a = ServerIdentity {
        server: "pod:u-a".into(),
        process: None,
        k8s: Some(crate::collect::identity::K8sIdentity {
            pod_uid: "u-a".into(),
            pod_name: Some("vllm-a".into()),
            namespace: Some("llm".into()),
            container_name: None,
            container_id: "c".into(),
        }),
    };
    let b = ServerIdentity::of(&crate::collect::identity::ServerKey::Process(7));
    // A is under KV pressure for 6 windows (one episode), B is healthy, then B's own episode
    // begins while A's goes on: each server's episode fires once, A's does not hold B's back.
    for i in 0..10 {
        let va = if i < 6 { Cause::KvCache } else { Cause::None };
        let vb = if i >= 4 { Cause::KvCache } else { Cause::None };
        observer(&a, &window(i, 100.0, 0, 0.5), &verdict(i, va));
        observer(&b, &window(i, 100.0, 0, 0.5), &verdict(i, vb));
    }
    assert_eq!(started.counts.get(), [("kv".to_owned(), 2)]);
    drop(observer);
    let firings = started.runner.await.unwrap();
    let who: Vec<(&str, u64)> = firings
        .iter()
        .map(|f| {
            (
                f.server.as_ref().unwrap().server.as_str(),
                f.window_start_unix_ms,
            )
        })
        .collect();
    assert_eq!(who, [("pod:u-a", 1000), ("pid:7", 5000)]);
    let body = firings[0].json();
    assert!(
        body.contains("\"server\":{\"server\":\"pod:u-a\""),
        "{body}"
    );
    assert!(body.contains("\"pod_name\":\"vllm-a\""), "{body}");
    let env = std::fs::read_to_string(&out).unwrap();
    let mut lines: Vec<&str> = env.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, ["pid:7  ", "pod:u-a vllm-a llm"]);
}

//! `stress --explain --service NAME=PORT`: a RAG gateway in front of an embedding service, a
//! vector index and an LLM, each a separate process; a fault on one hop at a time is named
//! with its hop and the cause inside it, and a healthy pipeline names no hop.

use inferscope_tests::{
    cases::{kv_pressure_load, llm},
    explain::describe,
    pipeline::{self, HopFault},
    root_or_skip,
};
use serde_json::Value;

/// The peak phase of `report`.
fn peak(report: &Value) -> &Value {
    report["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "peak")
        .expect("a peak phase")
}

/// The peak's hops: the holder and its cause inside.
fn holder(report: &Value) -> (Option<String>, String) {
    let p = peak(report);
    let hops = &p["hops"];
    if hops.is_null() {
        // No rise over the baseline: nothing to split.
        let rise = p["decomposition"]["increase_ms"].as_f64().unwrap_or(0.0);
        assert!(rise <= 0.0, "no hops: {}", describe(p));
        return (None, String::new());
    }
    let name = hops["holder"].as_str().map(str::to_owned);
    let cause = hops["parts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| Some(h["hop"].as_str().unwrap()) == name.as_deref())
        .map(|h| h["cause"].as_str().unwrap().to_owned())
        .unwrap_or_default();
    // The parts and the rest add up to the rise, none negative.
    let parts: f64 = hops["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["part_ms"].as_f64().unwrap())
        .inspect(|&ms| assert!(ms >= 0.0, "{hops}"))
        .sum();
    let (rise, rest) = (
        hops["rise_ms"].as_f64().unwrap(),
        hops["rest_ms"].as_f64().unwrap(),
    );
    assert!((parts + rest - rise).abs() < 1e-6 * rise.max(1.0), "{hops}");
    (name, cause)
}

#[test]
fn an_index_rebuild_is_the_search_hops_vector_index() {
    let Some(_machine) = root_or_skip("an_index_rebuild_is_the_search_hops_vector_index") else {
        return;
    };
    let (report, stats) = pipeline::run("hopsearch", HopFault::IndexRebuild, &llm(4.0, 4.0, 32));
    let (hop, cause) = holder(&report);
    assert_eq!(
        hop.as_deref(),
        Some("search"),
        "{}\n{stats}",
        describe(peak(&report))
    );
    assert_eq!(cause, "vector_index", "{}", peak(&report)["hops"]);
    // Every request went through every hop.
    assert!(
        stats["calls"]["search"].as_u64().unwrap_or(0) > 20,
        "{stats}"
    );
}

#[test]
fn kv_pressure_is_the_chat_hops_kv_cache() {
    let Some(_machine) = root_or_skip("kv_pressure_is_the_chat_hops_kv_cache") else {
        return;
    };
    let (report, stats) = pipeline::run("hopkv", HopFault::KvPressure, &kv_pressure_load());
    let (hop, cause) = holder(&report);
    assert_eq!(
        hop.as_deref(),
        Some("chat"),
        "{}\n{stats}",
        describe(peak(&report))
    );
    assert_eq!(cause, "kv_cache", "{}", peak(&report)["hops"]);
}

#[test]
fn a_lock_in_the_gateway_is_orchestration() {
    let Some(_machine) = root_or_skip("a_lock_in_the_gateway_is_orchestration") else {
        return;
    };
    let (report, stats) = pipeline::run("hoplock", HopFault::GatewayLock(150), &llm(2.0, 4.0, 32));
    let (hop, _) = holder(&report);
    assert_eq!(
        hop.as_deref(),
        Some("orchestration"),
        "{}\n{stats}",
        describe(peak(&report))
    );
}

#[test]
fn a_cpu_quota_on_the_reranker_is_its_cpu_runqueue() {
    let Some(_machine) = root_or_skip("a_cpu_quota_on_the_reranker_is_its_cpu_runqueue") else {
        return;
    };
    let (report, stats) =
        pipeline::run("hopquota", HopFault::RerankCpuQuota(3), &llm(4.0, 4.0, 32));
    let (hop, cause) = holder(&report);
    assert_eq!(
        hop.as_deref(),
        Some("rerank"),
        "{}\n{stats}",
        describe(peak(&report))
    );
    assert_eq!(cause, "cpu_runqueue", "{}", peak(&report)["hops"]);
}

#[test]
fn a_healthy_pipeline_names_no_hop() {
    let Some(_machine) = root_or_skip("a_healthy_pipeline_names_no_hop") else {
        return;
    };
    // Two loads: 2 req/s (baseline, cooldown) and 4 req/s (peak).
    let (report, _) = pipeline::run("hopnone", HopFault::None, &llm(2.0, 4.0, 32));
    for p in report["phases"].as_array().unwrap() {
        assert_eq!(p["dominant"], "none", "{}", describe(p));
    }
    let p = peak(&report);
    let (hop, _) = holder(&report);
    assert_eq!(hop, None, "{}", p["hops"]);
}

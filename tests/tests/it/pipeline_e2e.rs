//! `stress --explain --service NAME=PORT`: a RAG gateway in front of an embedding service, a
//! vector index, a re-ranker and an LLM, each a separate process (`inferscope_tests::pipeline`);
//! a fault on one hop at a time is named with its hop and the cause inside it, a lock in the
//! gateway is `orchestration`, and a healthy pipeline at two loads names no hop. The cases are
//! the bench's (`cargo xtask bench attribution`), judged the same way.

use inferscope_tests::{explain::describe, pipeline, root_or_skip, scorecard};
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

/// Every phase's hops add up to its rise, none negative.
fn assert_hops_add_up(report: &Value) {
    for p in report["phases"].as_array().unwrap() {
        let hops = &p["hops"];
        if hops.is_null() {
            continue;
        }
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
        assert!(rest >= 0.0, "{hops}");
        assert!((parts + rest - rise).abs() < 1e-6 * rise.max(1.0), "{hops}");
    }
}

/// Runs the pipeline case `name` and checks its verdict as the bench does.
fn check(name: &str) {
    let Some(_machine) = root_or_skip(name) else {
        return;
    };
    let case = pipeline::cases()
        .into_iter()
        .find(|c| c.name == name)
        .unwrap();
    let report = (case.run)();
    assert_hops_add_up(&report);
    let row = scorecard::row(&case, &report);
    assert!(
        row.ok,
        "{name}: expected {}, got {} (other phases: {})\n{}\nhops: {}",
        row.expected,
        row.got,
        row.others,
        describe(peak(&report)),
        peak(&report)["hops"]
    );
}

#[test]
fn an_index_rebuild_is_the_search_hops_vector_index() {
    check("pipeline-index-rebuild");
}

#[test]
fn kv_pressure_is_the_chat_hops_kv_cache() {
    check("pipeline-kv-pressure");
}

#[test]
fn a_cpu_quota_on_the_reranker_is_its_cpu_runqueue() {
    check("pipeline-rerank-quota");
}

#[test]
fn a_lock_in_the_gateway_is_orchestration() {
    check("pipeline-gateway-lock");
}

#[test]
fn a_healthy_pipeline_at_two_loads_names_no_hop() {
    check("pipeline-healthy");
}

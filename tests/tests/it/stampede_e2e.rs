//! The KV-cache stampede (`chaos.stampede`, `inferscope_tests::stampede`): bursts of one hot
//! prompt released together right after the server's prefix cache was reset are
//! `duplicate_prefill`, with the server's metrics and without them (the client's own count of
//! copies sent while a twin was still in its prefill); the same prompt at the same mean rate,
//! spread out, is `none`. The cases are the bench's (`cargo xtask bench attribution`), judged
//! the same way.

use inferscope_tests::{explain::describe, root_or_skip, scorecard, stampede};
use serde_json::Value;

/// The phase `name` of `report`.
fn phase<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .expect("the phase")
}

/// Runs the case `name`, checks its verdict as the bench does; its report.
fn check(name: &str) -> Option<Value> {
    let _machine = root_or_skip(name)?;
    let case = stampede::cases()
        .into_iter()
        .find(|c| c.name == name)
        .unwrap();
    let report = (case.run)();
    let row = scorecard::row(&case, &report);
    assert!(
        row.ok,
        "{name}: expected {}, got {} (other phases: {})\n{}",
        row.expected,
        row.got,
        row.others,
        describe(phase(&report, "peak")),
    );
    Some(report)
}

/// The share of duplicated prefills the client counted in the windows of `phase`.
fn duplicate_shares(report: &Value, name: &str) -> Vec<f64> {
    report["timeline"]["windows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["phase"] == name)
        .filter_map(|w| w["load"]["duplicate_prefill_share"].as_f64())
        .collect()
}

#[test]
fn a_stampede_after_a_reset_is_duplicate_prefill() {
    let Some(report) = check("stampede") else {
        return;
    };
    // The bursts were sent (9 bursts of 24 on top of 40 requests at 4 req/s) and counted as
    // duplicates.
    let load = &phase(&report, "peak")["load"];
    assert!(load["requests"].as_u64().unwrap() >= 200, "{load}");
    let peak = duplicate_shares(&report, "peak");
    assert!(
        peak.iter().filter(|s| **s >= 0.5).count() >= 7,
        "{peak:?} {load}"
    );
    assert!(
        duplicate_shares(&report, "baseline")
            .iter()
            .all(|s| *s == 0.0)
    );
}

#[test]
fn a_stampede_on_a_server_without_metrics_is_duplicate_prefill() {
    check("stampede-nometrics");
}

#[test]
fn the_same_prompt_spread_out_is_none() {
    let Some(report) = check("hot-prompt-spread") else {
        return;
    };
    let peak = duplicate_shares(&report, "peak");
    assert!(peak.iter().all(|s| *s < 0.3), "{peak:?}");
}

//! `stress --explain --confirm`: the verdict of a KV-pressure peak and of a queue-bound peak is
//! confirmed by a step at half the load; a network verdict is said not to be confirmable by
//! load alone.
use inferscope_tests::{
    Sim,
    cases::{KV_PRESSURE_SIM, kv_pressure_load, llm},
    explain::{FIRST, Stress, assert_peak, describe, loopback, scenario},
    faults::{NoMetricsServer, Writes},
    root_or_skip,
};
use serde_json::Value;

/// The peak's confirmation outcome, after the peak's verdict is `verdict`.
fn outcome(report: &Value, verdict: &str) -> String {
    let peak = assert_peak(report, verdict, &[], &[]);
    peak["confirmation"]["outcome"]
        .as_str()
        .unwrap_or_else(|| panic!("no confirmation: {}", describe(peak)))
        .to_owned()
}

fn sim_confirmed(
    name: &str,
    profile: &str,
    flags: &[&str],
    load: &inferscope_tests::explain::Load,
) -> Value {
    let sim = Sim::start(
        &["nice", "-n", &FIRST.to_string()],
        profile,
        loopback(),
        flags,
    );
    let r = Stress::start(
        name,
        &scenario(name, &sim.url(), load),
        None,
        FIRST,
        &["--confirm"],
    )
    .finish();
    drop(sim);
    r
}

#[test]
fn kv_pressure_and_queue_are_confirmed_by_half_the_load() {
    let Some(_machine) = root_or_skip("kv_pressure_and_queue_are_confirmed_by_half_the_load")
    else {
        return;
    };
    let kv = sim_confirmed(
        "kvconfirm",
        "kv-pressure",
        &KV_PRESSURE_SIM,
        &kv_pressure_load(),
    );
    assert_eq!(outcome(&kv, "kv_cache"), "confirmed");
    let queue = sim_confirmed("qconfirm", "queue-bound", &[], &llm(2.0, 12.0, 256));
    assert_eq!(outcome(&queue, "queue"), "confirmed");
}

#[test]
fn a_network_verdict_cannot_be_confirmed_by_load() {
    let Some(_machine) = root_or_skip("a_network_verdict_cannot_be_confirmed_by_load") else {
        return;
    };
    // The nagle-nometrics case: the first token waits in the server's socket.
    let server = NoMetricsServer::start(&[], loopback(), 4, 4.0, Writes::Nagle);
    let yaml = scenario("nconfirm", &server.url(), &llm(2.0, 24.0, 32))
        .replace("model: inferscope-sim", "model: nometrics");
    let r = Stress::start("nconfirm", &yaml, None, FIRST, &["--confirm"]).finish();
    drop(server);
    assert_eq!(outcome(&r, "network"), "cannot_by_load");
}

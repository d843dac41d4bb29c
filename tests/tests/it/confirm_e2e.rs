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

/// The knee search's `beyond` verdict is put to the test at half the failing load: the server
/// admits 2 requests at once, so past its capacity requests wait for a slot (queue), and well
/// below it they do not.
#[test]
fn beyond_the_knee_queue_is_confirmed_at_half_the_load() {
    let Some(_machine) = root_or_skip("beyond_the_knee_queue_is_confirmed_at_half_the_load") else {
        return;
    };
    let server = NoMetricsServer::start(&[], loopback(), 2, 4.0, Writes::NoDelay);
    let dir = tempfile::tempdir().unwrap();
    let o = std::process::Command::new(inferscope_tests::inferscope_bin())
        .args(["stress", "--target", &server.url(), "--model", "nometrics"])
        .args(["--max-tokens", "16", "--quiet"])
        .args(["--find-max", "ttft_p95 < 250ms", "--rate", "8"])
        .args(["--step-duration", "5s", "--search-time", "60s"])
        .args(["--explain", "--confirm", "--report-dir"])
        .arg(dir.path())
        .arg("--out")
        .arg(dir.path().join("search.json"))
        .output()
        .expect("run inferscope stress --find-max");
    drop(server);
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stdout}{stderr}");
    let text = std::fs::read_to_string(dir.path().join("report.json"))
        .unwrap_or_else(|e| panic!("no report.json ({e}): {stdout}{stderr}"));
    let report: Value = serde_json::from_str(&text).unwrap();
    let beyond = report["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "beyond")
        .unwrap_or_else(|| panic!("no beyond phase: {stdout}"));
    assert_eq!(beyond["dominant"], "queue", "{}", describe(beyond));
    let c = &beyond["confirmation"];
    assert_eq!(c["outcome"], "confirmed", "{c}\n{stdout}{stderr}");
    assert!(
        c["step"]
            .as_str()
            .unwrap_or("")
            .starts_with("half the load ("),
        "{c}"
    );
    let line = stdout
        .lines()
        .find(|l| l.starts_with("beyond "))
        .unwrap_or_else(|| panic!("no beyond line: {stdout}"));
    assert!(line.contains("; confirmed: at half the load"), "{line}");
}

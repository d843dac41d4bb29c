//! The node daemon names the bottleneck for a load generator it does not run: the sim under
//! KV pressure, `inferscope daemon --port`, and a Python `http.client` generator that marks its
//! `baseline` and `peak` phases on the control API. The peak's report says `kv_cache`, `/metrics`
//! says so while the peak runs, the baseline is `none`; and the same when the daemon starts
//! before the server and the server restarts between the phases.
use std::{
    net::SocketAddr,
    process::Child,
    time::{Duration, Instant},
};

use inferscope_tests::{Sim, daemon::Daemon, explain::loopback, free_port, root_or_skip};
use serde_json::Value;

const SIM_FLAGS: &[&str] = &["--num-gpu-blocks", "256"];

/// The Python generator against `sim`.
fn generator(sim: &Sim, d: &Daemon, phases: &[&str], extra: &[&str]) -> Child {
    inferscope_tests::daemon::generator(&sim.url(), d, phases, extra)
}

/// Scrapes `/metrics` until `generator` exits; true when a scrape showed the `kv_cache` verdict for a
/// window of the peak of the server listening on `port` (`server="port:PORT"`).
fn watch_for_kv_in_peak(d: &Daemon, generator: &mut Child, port: u16) -> bool {
    let mut seen = false;
    let deadline = Instant::now() + Duration::from_mins(2);
    while generator.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the generator did not finish");
        let m = d.get("/metrics");
        seen |= m.contains(&format!(
            "inferscope_verdict{{server=\"port:{port}\",cause=\"kv_cache\"}} 1\n"
        )) && m.contains(&format!(
            "inferscope_window_start_timestamp_seconds{{phase=\"peak\",server=\"port:{port}\"}}"
        ));
        std::thread::sleep(Duration::from_millis(500));
    }
    let out = generator.wait_with_output_ref();
    assert!(out.0.success(), "the Python generator failed: {}", out.1);
    seen
}

trait WaitRef {
    fn wait_with_output_ref(&mut self) -> (std::process::ExitStatus, String);
}

impl WaitRef for Child {
    fn wait_with_output_ref(&mut self) -> (std::process::ExitStatus, String) {
        use std::io::Read as _;
        let mut out = String::new();
        if let Some(s) = self.stdout.as_mut() {
            let _ = s.read_to_string(&mut out);
        }
        (self.wait().unwrap(), out)
    }
}

fn dominant(report: &Value, phase: &str) -> String {
    let p = report["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == phase)
        .unwrap_or_else(|| panic!("no phase {phase} in the report"));
    p["dominant"].as_str().unwrap().to_owned()
}

fn assert_verdicts(d: &Daemon) {
    let peak = d.report("peak");
    assert_eq!(peak["schema_version"], 2);
    assert_eq!(
        dominant(&peak, "peak"),
        "kv_cache",
        "{peak:#}\n{}\n{}",
        d.get("/api/v1/timeline"),
        d.log()
    );
    let base = d.report("baseline");
    assert_eq!(
        dominant(&base, "baseline"),
        "none",
        "{base:#}\n{}\n{}",
        d.get("/api/v1/timeline"),
        d.log()
    );
    let verdicts: Value = serde_json::from_str(&d.get("/api/v1/verdicts?limit=5")).unwrap();
    let list = verdicts.as_array().unwrap();
    assert_eq!(list.len(), 5, "{verdicts:#}");
    assert!(
        list.iter()
            .all(|v| v["verdict"]["cause"].is_string() && v["window"].is_object())
    );
    assert!(d.get("/api/v1/report.html?phase=peak").contains("<html"));
    let missing = d.get("/api/v1/report?phase=nope");
    assert!(missing.contains("phases on the time line"), "{missing}");
    assert!(d.get("/api/v1/report?from=x").contains("?phase=NAME"));
}

#[test]
fn an_external_generator_marks_phases_and_the_peak_is_kv_cache() {
    let Some(_machine) =
        root_or_skip("an_external_generator_marks_phases_and_the_peak_is_kv_cache")
    else {
        return;
    };
    let sim = Sim::start(&["nice", "-n", "-10"], "kv-pressure", loopback(), SIM_FLAGS);
    let d = Daemon::start(&["--port", &sim.addr.port().to_string()]);
    // A warm-up first: the cold sim's first requests are slow, and one such window of eight
    // is a quarter of a baseline phase, enough to call it `unexplained`.
    let mut g = generator(
        &sim,
        &d,
        &["warmup:2:2", "baseline:8:2", "peak:12:16", "cooldown:3:2"],
        &[],
    );
    let seen = watch_for_kv_in_peak(&d, &mut g, sim.addr.port());
    assert!(seen, "/metrics never showed kv_cache during the peak");
    assert_verdicts(&d);
    d.stop();
}

/// A vector service the daemon only watches: an external generator's searches at 40/s and an
/// operator's index rebuild 1 s into the peak. No client records reach the daemon: the kernel's
/// timing of the sim's exchanges, and the sim's own search and rebuild counters, name it.
#[test]
fn an_index_rebuild_under_an_external_generator_is_vector_index() {
    let Some(_machine) =
        root_or_skip("an_index_rebuild_under_an_external_generator_is_vector_index")
    else {
        return;
    };
    let sim = Sim::start(&["nice", "-n", "-10"], "healthy", loopback(), &[]);
    let d = Daemon::start(&["--port", &sim.addr.port().to_string()]);
    let mut g = generator(
        &sim,
        &d,
        &[
            "warmup:2:40",
            "baseline:8:40",
            "peak:10:40",
            "cooldown:3:40",
        ],
        &["--vector", "--event", "peak:1:/v1/vector/rebuild"],
    );
    let (status, out) = g.wait_with_output_ref();
    assert!(status.success(), "the Python generator failed: {out}");
    assert!(out.contains("/v1/vector/rebuild: HTTP 202"), "{out}");
    std::thread::sleep(Duration::from_secs(2));
    let peak = d.report("peak");
    let p = peak["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "peak")
        .unwrap();
    assert_eq!(p["dominant"], "vector_index", "{p:#}\n{}", d.log());
    let evidence = p["evidence"].to_string();
    assert!(evidence.contains("kernel_exchange_p99_ms"), "{evidence}");
    assert!(evidence.contains("index_rebuild"), "{evidence}");
    let base = d.report("baseline");
    assert_eq!(dominant(&base, "baseline"), "none", "{base:#}");
    d.stop();
}

#[test]
fn the_daemon_before_the_server_and_the_server_restarted() {
    let Some(_machine) = root_or_skip("the_daemon_before_the_server_and_the_server_restarted")
    else {
        return;
    };
    let addr = loopback();
    let d = Daemon::start(&["--port", &addr.port().to_string()]);
    std::thread::sleep(Duration::from_secs(2));
    let sim = Sim::start(&["nice", "-n", "-10"], "kv-pressure", addr, SIM_FLAGS);
    let mut g = generator(&sim, &d, &["baseline:8:2"], &[]);
    assert!(g.wait_with_output_ref().0.success());
    let first = sim.pid();
    drop(sim);
    let sim = Sim::start(&["nice", "-n", "-10"], "kv-pressure", addr, SIM_FLAGS);
    assert_ne!(first, sim.pid());
    // Rediscovery (every 10 windows) finds the new process; the peak starts once it has, so
    // that what is judged is a peak the daemon watched, not the seconds before it looked.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !watched(&d).contains(&u64::from(sim.pid())) {
        assert!(
            Instant::now() < deadline,
            "the daemon never found the restarted server"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let mut g = generator(&sim, &d, &["peak:14:16", "cooldown:3:2"], &[]);
    let seen = watch_for_kv_in_peak(&d, &mut g, sim.addr.port());
    assert!(seen, "/metrics never showed kv_cache during the peak");
    assert_verdicts(&d);
    d.stop();
}

/// The processes the daemon watches now.
fn watched(d: &Daemon) -> Vec<u64> {
    let status: Value = serde_json::from_str(&d.get("/api/v1/timeline")).unwrap();
    status["processes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["pid"].as_u64())
        .collect()
}

#[test]
fn port_discovery_sees_a_server_in_another_network_namespace() {
    let Some(_machine) = root_or_skip("port_discovery_sees_a_server_in_another_network_namespace")
    else {
        return;
    };
    let ns = inferscope_tests::NetNs::create_in("disc", [10, 213, 57]);
    let addr = SocketAddr::from(([10, 213, 57, 2], free_port()));
    let sim = Sim::start(&["ip", "netns", "exec", &ns.name], "healthy", addr, &[]);
    let pids = inferscope::collect::discover::pids_listening_on(addr.port());
    assert!(pids.contains(&sim.pid()), "{pids:?} lacks {}", sim.pid());
}

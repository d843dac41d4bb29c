//! One daemon, three servers on the node at once, each with its own time line and verdict: sim
//! A under KV pressure in a pod (a kubelet-shaped cgroup path, in a network namespace of its
//! own), sim B healthy on the same port in another network namespace, and C, a Python server
//! without metrics, queueing on the host. The daemon starts before them, finds them by their
//! ports and their metrics by itself (no `--metrics-url`), names A's pod from a kubelet pod list
//! (a test double: a JSON file served by Python's file server), and says A `kv_cache`, B
//! `none`, C `queue`, each under its own `server` labels on `/metrics` and in its own report.
//! Its `--triggers` rules fire once per episode of each server: a `run:` rule on `kv_cache`
//! runs its command once, for A, with A's identity in the environment; a `webhook:` rule on
//! `queue` POSTs C's firing, C's identity in the body.
use std::{
    net::SocketAddr,
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::mpsc::Receiver,
    time::{Duration, Instant},
};

use inferscope_tests::{
    NetNs, Sim,
    daemon::Daemon,
    explain::loopback,
    faults::{NoMetricsServer, Writes},
    free_port, root_or_skip, wait_ready, webhook_server,
};
use serde_json::Value;

const POD_UID: &str = "6a1f0c2e-3b4d-4e5f-8a9b-0c1d2e3f4a5b";
const CONTAINER_ID: &str = "5e4d3c2b1a0f9e8d7c6b5a4f3e2d1c0b5e4d3c2b1a0f9e8d7c6b5a4f3e2d1c0b";

/// A kubelet-shaped cgroup (cgroup v1 `cpu` hierarchy, `cgroupfs` driver) for pod A's
/// container, removed when dropped.
struct PodCgroup(PathBuf);

impl PodCgroup {
    fn create() -> Self {
        let dir = PathBuf::from(format!(
            "/sys/fs/cgroup/cpu/kubepods/burstable/pod{POD_UID}/{CONTAINER_ID}"
        ));
        std::fs::create_dir_all(&dir).expect("create the pod's cgroup");
        Self(dir)
    }

    /// A command prefix that joins this cgroup, then execs the rest.
    fn join(&self) -> Vec<String> {
        vec![
            "sh".into(),
            "-c".into(),
            format!("echo $$ > {}/cgroup.procs && exec \"$@\"", self.0.display()),
            "sh".into(),
        ]
    }
}

impl Drop for PodCgroup {
    fn drop(&mut self) {
        // Innermost first; each is empty once its processes were killed.
        for dir in self.0.ancestors().take(4) {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// A child process killed when dropped.
struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The kubelet's `/pods` answer naming pod A, served by Python's file server: a test double of
/// the kubelet (or of the API server's pod list), not a kubelet.
fn kubelet_pods_double() -> (Kill, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let list = serde_json::json!({
        "kind": "PodList",
        "apiVersion": "v1",
        "items": [{
            "metadata": {"name": "sim-a-0", "namespace": "llm", "uid": POD_UID},
            "status": {"containerStatuses": [
                {"name": "sim", "containerID": format!("containerd://{CONTAINER_ID}")}
            ]}
        }]
    });
    std::fs::write(dir.path().join("pods"), list.to_string()).unwrap();
    let addr = loopback();
    let mut child = Command::new("python3")
        .args(["-m", "http.server", &addr.port().to_string()])
        .args(["--bind", "127.0.0.1", "--directory"])
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn python3 -m http.server");
    wait_ready(
        &mut child,
        addr,
        "/pods",
        "PodList",
        "the kubelet test double",
    );
    (Kill(child), format!("http://{addr}/pods"), dir)
}

/// The Python generator against `target`, answers of `output_tokens`.
fn generator(target: &str, d: &Daemon, phases: &[&str], output_tokens: u32) -> Child {
    let tokens = output_tokens.to_string();
    inferscope_tests::daemon::generator(target, d, phases, &["--output-tokens", &tokens])
}

/// The daemon's servers (`/api/v1/timeline`), by `server` key.
fn servers(d: &Daemon) -> Vec<Value> {
    let status: Value = serde_json::from_str(&d.get("/api/v1/timeline")).unwrap();
    status["servers"].as_array().cloned().unwrap_or_default()
}

fn dominant(report: &Value, phase: &str) -> String {
    report["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == phase)
        .unwrap_or_else(|| panic!("no phase {phase} in the report: {report:#}"))["dominant"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The rules file: `kv-run` appends the firing server's identity to `fired`, `queue-hook`
/// POSTs to `hook_url`; each fires once per server (a 10-minute cooldown).
fn triggers_file(dir: &std::path::Path, fired: &std::path::Path, hook_url: &str) -> PathBuf {
    let rules = dir.join("triggers.yaml");
    std::fs::write(
        &rules,
        format!(
            "triggers:\n  - name: kv-run\n    when: [verdict == kv_cache]\n    for: 3s\n    cooldown: 10m\n    run: [/bin/sh, -c, 'echo \"$INFERSCOPE_SERVER|$INFERSCOPE_K8S_POD_NAME|$INFERSCOPE_K8S_NAMESPACE_NAME\" >> {}']\n  - name: queue-hook\n    when: [verdict == queue]\n    for: 3s\n    cooldown: 10m\n    webhook: {hook_url}\n",
            fired.display()
        ),
    )
    .unwrap();
    rules
}

/// The three servers' keys and where A and B listen.
struct Keys {
    a: String,
    b: String,
    c: String,
    a_addr: SocketAddr,
    b_addr: SocketAddr,
}

/// Waits until the daemon has found the three (every 10 windows), A's and B's metrics and
/// A's pod name.
fn wait_found(d: &Daemon, k: &Keys) {
    let deadline = Instant::now() + Duration::from_mins(1);
    loop {
        let s = servers(d);
        let by = |key: &str| s.iter().find(|x| x["server"] == key).cloned();
        let ready = by(&k.a).is_some_and(|a| {
            a["metrics_url"] == format!("http://{}/metrics", k.a_addr)
                && a["k8s"]["pod_name"] == "sim-a-0"
        }) && by(&k.b)
            .is_some_and(|b| b["metrics_url"] == format!("http://{}/metrics", k.b_addr))
            && by(&k.c).is_some_and(|c| c["metrics_url"].is_null());
        if ready {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the daemon did not find the three servers: {s:#?}\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Waits for the generators; true when `/metrics` showed `kv_cache` for A's pod, under its own
/// labels, while they ran. Prints the daemon's cost meanwhile.
fn watch_load(d: &Daemon, k: &Keys, gens: &mut [Child]) -> bool {
    let (_, cpu_before) = d.cost();
    let started = Instant::now();
    let pod_labels = format!(
        "server=\"{}\",k8s_pod_name=\"sim-a-0\",k8s_pod_uid=\"{POD_UID}\",k8s_namespace_name=\"llm\",k8s_container_name=\"sim\"",
        k.a
    );
    let kv_a = format!("inferscope_verdict{{{pod_labels},cause=\"kv_cache\"}} 1\n");
    let mut seen_kv_a = false;
    let mut metrics = String::new();
    while gens.iter_mut().any(|g| g.try_wait().unwrap().is_none()) {
        assert!(
            started.elapsed() < Duration::from_mins(2),
            "the generators did not finish"
        );
        metrics = d.get("/metrics");
        seen_kv_a |= metrics.contains(&kv_a);
        std::thread::sleep(Duration::from_millis(500));
    }
    for g in gens {
        assert!(g.wait().unwrap().success(), "a generator failed");
    }
    let (rss_kib, cpu_after) = d.cost();
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "the daemon with three servers under load (this build's profile): RSS {} MiB, CPU {:.1}% of a core over {secs:.0} s",
        rss_kib / 1024,
        (cpu_after - cpu_before) / (secs * 10.0)
    );
    for key in [&k.a, &k.b, &k.c] {
        assert!(
            metrics.contains(&format!("inferscope_verdict_confidence{{server=\"{key}\"")),
            "/metrics lacks {key}'s verdict:\n{metrics}"
        );
    }
    seen_kv_a
}

/// Each server's own report of the peak names its own cause; without `server` the answer
/// names the servers; `/api/v1/verdicts?server=` lists that server's only.
fn check_reports(d: &Daemon, k: &Keys) {
    let report = |key: &str, phase: &str| -> Value {
        let body = d.get(&format!("/api/v1/report?phase={phase}&server={key}"));
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("report {key} {phase}: {e}: {body}"))
    };
    let keys = [&k.a, &k.b, &k.c];
    let reports: Vec<Value> = keys.iter().map(|key| report(key, "peak")).collect();
    let got: Vec<(String, String)> = keys
        .iter()
        .zip(&reports)
        .map(|(key, r)| {
            assert_eq!(r["run"]["target"], **key, "{r:#}");
            ((*key).clone(), dominant(r, "peak"))
        })
        .collect();
    let want = [
        (k.a.clone(), "kv_cache".to_owned()),
        (k.b.clone(), "none".to_owned()),
        (k.c.clone(), "queue".to_owned()),
    ];
    let phases = Value::Array(reports.iter().map(|r| r["phases"].clone()).collect());
    assert_eq!(got, want, "\n{phases:#}\n{}", d.log());
    // C's peak opened connections (its queue grew the generator's pool): the kernel saw each
    // accept in softirq context, with no process named; the daemon counts it for the server
    // that took the socket (before, with several servers, it counted no accept at all).
    let accepts: u64 = reports[2]["timeline"]["windows"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|w| w["net"]["connects"].as_u64())
        .sum();
    assert!(accepts > 0, "no accept counted for {}", k.c);
    let any = d.get("/api/v1/report?phase=peak");
    assert!(any.contains("give ?server=") && any.contains(&k.b), "{any}");
    let verdicts: Value =
        serde_json::from_str(&d.get(&format!("/api/v1/verdicts?limit=3&server={}", k.c))).unwrap();
    let list = verdicts.as_array().unwrap();
    assert_eq!(list.len(), 3, "{verdicts:#}");
    assert!(list.iter().all(|v| v["server"]["server"] == k.c.as_str()));
}

/// `kv-run` fired once, for A, with A's identity in its environment; every `queue-hook` body
/// names its server, C's among them, each server once.
fn check_triggers(d: &Daemon, k: &Keys, fired: &std::path::Path, hooks: &Receiver<String>) {
    let lines = std::fs::read_to_string(fired).unwrap_or_default();
    assert_eq!(
        lines.lines().collect::<Vec<_>>(),
        [format!("{}|sim-a-0|llm", k.a)],
        "{}",
        d.log()
    );
    let bodies: Vec<Value> = hooks
        .try_iter()
        .map(|b| serde_json::from_str(&b).unwrap())
        .collect();
    let mut hooked: Vec<&str> = bodies
        .iter()
        .map(|b| b["server"]["server"].as_str().unwrap())
        .collect();
    hooked.sort_unstable();
    let n = hooked.len();
    hooked.dedup();
    assert_eq!(n, hooked.len(), "one firing per server: {bodies:#?}");
    assert!(hooked.contains(&k.c.as_str()), "{bodies:#?}");
    assert!(
        bodies
            .iter()
            .all(|b| b["rule"] == "queue-hook" && b["verdict"]["cause"] == "queue")
    );
    let m = d.get("/metrics");
    assert!(
        m.contains("inferscope_trigger_firings_total{rule=\"kv-run\"} 1\n"),
        "{m}"
    );
}

#[test]
fn three_servers_on_one_node_each_get_their_own_verdict() {
    let Some(_machine) = root_or_skip("three_servers_on_one_node_each_get_their_own_verdict")
    else {
        return;
    };
    let (_kubelet, pods_url, dir) = kubelet_pods_double();
    let (hook_url, hooks) = webhook_server();
    let fired = dir.path().join("fired");
    let rules = triggers_file(dir.path(), &fired, &hook_url);
    let port = free_port();
    let c_addr = loopback();
    let d = Daemon::start(&[
        "--port",
        &port.to_string(),
        "--port",
        &c_addr.port().to_string(),
        "--pods-url",
        &pods_url,
        "--triggers",
        &rules.to_string_lossy(),
    ]);

    // A: the pod, in a network namespace of its own, under KV pressure.
    let ns_a = NetNs::create_in("srva", [10, 213, 81]);
    let ns_b = NetNs::create_in("srvb", [10, 213, 82]);
    let pod = PodCgroup::create();
    let mut prefix_a = pod.join();
    prefix_a.extend(["nice", "-n", "-10", "ip", "netns", "exec", &ns_a.name].map(String::from));
    let prefix_a: Vec<&str> = prefix_a.iter().map(String::as_str).collect();
    let a_addr = SocketAddr::from(([10, 213, 81, 2], port));
    let sim_a = Sim::start(
        &prefix_a,
        "kv-pressure",
        a_addr,
        &["--num-gpu-blocks", "256"],
    );
    // B: healthy, on the same port in another namespace; first on the CPUs, so that A's peak
    // on the same two CPUs does not slow it (it is not what this test is about).
    let b_addr = SocketAddr::from(([10, 213, 82, 2], port));
    let sim_b = Sim::start(
        &["nice", "-n", "-15", "ip", "netns", "exec", &ns_b.name],
        "healthy",
        b_addr,
        &[],
    );
    // C: no metrics, 2 requests at a time; first on the CPUs like B: at niceness 0 beside A's
    // peak its threads waited for a CPU in 8 of 13 peak windows of one fresh-clone run and the
    // verdict was (rightly) cpu_runqueue, where this test reads its slots.
    let c = NoMetricsServer::start(&["nice", "-n", "-15"], c_addr, 2, 4.0, Writes::NoDelay);

    let netns_b = std::fs::read_link(format!("/proc/{}/ns/net", sim_b.pid())).unwrap();
    let netns_b = netns_b.to_string_lossy();
    let inode_b = netns_b.trim_start_matches("net:[").trim_end_matches(']');
    let keys = Keys {
        a: format!("pod:{POD_UID}"),
        b: format!("port:{port}@netns:{inode_b}"),
        c: format!("port:{}", c_addr.port()),
        a_addr,
        b_addr,
    };
    wait_found(&d, &keys);

    let mut gens = [
        generator(
            &sim_a.url(),
            &d,
            &["baseline:10:2", "peak:14:16", "cooldown:3:2"],
            384,
        ),
        generator(
            &sim_b.url(),
            &d,
            &["baseline:10:2", "peak:14:2", "cooldown:3:2"],
            32,
        ),
        generator(
            &format!("http://{}", c.addr),
            &d,
            &["baseline:10:2", "peak:14:30", "cooldown:3:2"],
            32,
        ),
    ];
    let seen_kv_a = watch_load(&d, &keys, &mut gens);
    check_reports(&d, &keys);
    assert!(seen_kv_a, "/metrics never showed kv_cache for {}", keys.a);
    check_triggers(&d, &keys, &fired, &hooks);
    drop((sim_a, sim_b, c));
    d.stop();
}

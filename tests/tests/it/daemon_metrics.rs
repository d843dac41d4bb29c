//! The daemon finds a server's metrics by itself: no `--metrics-url`, no `--port`, only the
//! processes to watch. It dials each one's listening addresses for `/metrics` and scrapes the
//! one whose metric families name a known server: the sim (vLLM's names) listening on every
//! address of its own network namespace, as a pod without `hostNetwork` does (reached on the
//! namespace's address, read from its `fib_trie`); llama.cpp's `llama-server`, a server this
//! project did not write (its own test: `cargo xtask test` runs the tests named `llama` once the
//! engine is built); and a server without metrics, which is said and not scraped.
use std::{
    net::SocketAddr,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use inferscope_tests::{
    NetNs,
    daemon::Daemon,
    engine::{self, LlamaServer},
    explain::loopback,
    free_port, inferscope_bin, root_or_skip, wait_ready,
};

/// A child process killed when dropped.
struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until the daemon's `/metrics` carries a server signal and its log says where it found
/// it; returns the log.
fn wait_scraped(d: &Daemon, url: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let log = d.log();
        let metrics = d.get("/metrics");
        if log.contains(&format!("scraping {url}"))
            && metrics.contains("inferscope_server_running_requests")
        {
            return log;
        }
        assert!(
            Instant::now() < deadline,
            "the daemon did not scrape {url}\nlog:\n{log}\n/metrics:\n{metrics}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn the_daemon_finds_and_scrapes_each_server_s_metrics_by_itself() {
    let Some(_m) = root_or_skip("daemon_metrics") else {
        return;
    };
    // The sim in a namespace of its own, listening on 0.0.0.0 there.
    let ns = NetNs::create_in("dm", [10, 213, 61]);
    let port = free_port();
    let mut sim = Command::new("ip");
    sim.args(["netns", "exec", &ns.name])
        .arg(inferscope_bin())
        .args(["sim", "--profile", "healthy", "--corpus-size", "200"])
        .args(["--listen", &format!("0.0.0.0:{port}")])
        .stdout(Stdio::null());
    let mut sim = Kill(sim.spawn().expect("spawn the sim in its namespace"));
    let in_ns = SocketAddr::from(([10, 213, 61, 2], port));
    wait_ready(
        &mut sim.0,
        in_ns,
        "/metrics",
        "vllm:",
        "the sim in its namespace",
    );
    // A server without metrics: Python's file server (404 on /metrics).
    let plain = loopback();
    let mut py = Kill(
        Command::new("python3")
            .args([
                "-m",
                "http.server",
                &plain.port().to_string(),
                "--bind",
                "127.0.0.1",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn python3 -m http.server"),
    );
    wait_ready(&mut py.0, plain, "/", "", "python3 -m http.server");

    let d = Daemon::start(&[
        "--pid",
        &py.0.id().to_string(),
        "--pid",
        &sim.0.id().to_string(),
    ]);
    let url = format!("http://{in_ns}/metrics");
    let log = wait_scraped(&d, &url);
    assert!(
        log.contains(&format!("server {}", sim.0.id())) && log.contains("(Vllm)"),
        "{log}"
    );
    assert!(
        log.contains(&format!("server {}", py.0.id()))
            && log.contains(&format!("no /metrics on {plain}")),
        "the server without metrics is said: {log}"
    );
    d.stop();
}

/// llama.cpp's server, found the same way: a server this project did not write.
#[test]
fn the_daemon_finds_and_scrapes_llama_servers_metrics_by_itself() {
    let Some(_m) = root_or_skip("daemon_metrics (llama-server)") else {
        return;
    };
    if !engine::built_or_skip("daemon_metrics (llama-server)") {
        return;
    }
    let llama = LlamaServer::start(&[], loopback(), &engine::Config::slots(2));
    let d = Daemon::start(&["--pid", &llama.pid().to_string()]);
    let log = wait_scraped(&d, &format!("http://{}/metrics", llama.addr));
    assert!(log.contains("(LlamaCpp)"), "{log}");
    d.stop();
}

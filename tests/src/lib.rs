//! Helpers for inferscope's integration tests that need root and a real kernel.

pub mod cases;
pub mod chroma;
pub mod collector;
pub mod daemon;
pub mod engine;
pub mod explain;
pub mod faults;
pub mod llamacpp_cases;
pub mod pipeline;
pub mod scorecard;
pub mod stampede;
pub mod sweeps;

use std::sync::{Mutex, MutexGuard, PoisonError};

/// The machine, held by one root test at a time: the tests share its two CPUs, and the
/// verdict and latency tests read contention from another test as a bottleneck.
pub struct Machine(#[allow(dead_code)] MutexGuard<'static, ()>);

/// Takes the machine for the calling test (waits for the test that holds it).
#[must_use]
pub fn machine() -> Machine {
    static ONE: Mutex<()> = Mutex::new(());
    Machine(ONE.lock().unwrap_or_else(PoisonError::into_inner))
}

/// The machine when running as root; otherwise prints why the calling test is skipped.
#[must_use]
pub fn root_or_skip(test: &str) -> Option<Machine> {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        missing_peer(test, "needs root (eBPF); CI runs it as root");
        return None;
    }
    Some(machine())
}

/// `test` cannot run because `why` (no root, the engine not built): under `CI=true` (as `.ci/run`
/// sets it) that fails the test, since a CI run must not pass by skipping what it was meant to
/// check; elsewhere the test is skipped, saying why.
pub fn missing_peer(test: &str, why: &str) {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    assert!(
        !ci,
        "{test}: {why} (CI=true: a missing peer fails the run; `cargo xtask setup` installs the peers)"
    );
    println!("skipping {test}: {why}");
}

/// Child processes that busy-loop until dropped.
pub struct Hogs(Vec<std::process::Child>);

impl Hogs {
    /// Starts `n` busy-looping `sh` processes at niceness `nice` (negative = heavier than a
    /// default task, so a waking task cannot simply preempt them).
    #[must_use]
    pub fn start(n: usize, nice: i32) -> Self {
        Self::spawn(n, nice, None)
    }

    /// Like [`Hogs::start`], each hog pinned to `cpu` (`taskset -c`).
    #[must_use]
    pub fn start_on(n: usize, nice: i32, cpu: usize) -> Self {
        Self::spawn(n, nice, Some(cpu))
    }

    fn spawn(n: usize, nice: i32, cpu: Option<usize>) -> Self {
        let nice = nice.to_string();
        let cpu = cpu.map(|c| c.to_string());
        Self(
            (0..n)
                .map(|_| {
                    let mut argv: Vec<&str> = Vec::new();
                    if let Some(c) = &cpu {
                        argv.extend(["taskset", "-c", c]);
                    }
                    argv.extend(["nice", "-n", &nice, "sh", "-c", "while :; do :; done"]);
                    std::process::Command::new(argv[0])
                        .args(&argv[1..])
                        .spawn()
                        .unwrap_or_else(|e| panic!("spawn {argv:?}: {e}"))
                })
                .collect(),
        )
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Number of CPUs this process may run on.
#[must_use]
pub fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

/// The `inferscope` binary next to the calling test or bench executable
/// (`target/<profile>/inferscope`).
#[must_use]
pub fn inferscope_bin() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // A test: target/<profile>/deps/<test>-<hash>; a binary: target/<profile>/<bin>.
    let dir = exe.parent().expect("an executable lives in a directory");
    let dir = if dir.ends_with("deps") {
        dir.parent().expect("deps lives in target/<profile>")
    } else {
        dir
    };
    let bin = dir.join("inferscope");
    assert!(
        bin.is_file(),
        "{} is missing; build it: cargo build -p inferscope",
        bin.display()
    );
    bin
}

/// A loopback port that was free a moment ago (bound on :0, then closed).
#[must_use]
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local_addr").port()
}

/// One plain HTTP/1.1 GET of `path` on `addr`; the response body, or `None` when the server
/// cannot be reached.
#[must_use]
pub fn http_get(addr: std::net::SocketAddr, path: &str) -> Option<String> {
    http(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
        std::time::Duration::from_secs(5),
    )
}

/// One plain HTTP/1.1 POST of the JSON `body` to `path` on `addr` (30 s to answer); the
/// response body, or `None` when the server cannot be reached.
#[must_use]
pub fn http_post_json(addr: std::net::SocketAddr, path: &str, body: &str) -> Option<String> {
    http(
        addr,
        &format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
        std::time::Duration::from_secs(30),
    )
}

/// Sends `request` on a new connection to `addr`; the body of the answer, read within `timeout`.
fn http(addr: std::net::SocketAddr, request: &str, timeout: std::time::Duration) -> Option<String> {
    use std::io::{Read as _, Write as _};
    let mut s =
        std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(timeout)).ok()?;
    s.write_all(request.as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())
}

/// Waits up to 60 s until `GET path` on `addr` answers a body containing `ready`; panics when
/// `child` (called `what`) exits first or the time runs out.
pub fn wait_ready(
    child: &mut std::process::Child,
    addr: std::net::SocketAddr,
    path: &str,
    ready: &str,
    what: &str,
) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_mins(1);
    loop {
        if http_get(addr, path).is_some_and(|b| b.contains(ready)) {
            return;
        }
        if let Some(st) = child.try_wait().expect("try_wait") {
            panic!("{what} exited at start: {st}");
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what} did not answer {path} on {addr} within 60 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// `inferscope sim` in its own process, killed when dropped.
pub struct Sim {
    child: std::process::Child,
    /// Where it listens.
    pub addr: std::net::SocketAddr,
}

impl Sim {
    /// Starts `inferscope sim --profile PROFILE --listen ADDR EXTRA...` (no `--profile` when
    /// `profile` is empty) under `prefix` (e.g.
    /// `["taskset", "-c", "1"]`, or `["ip", "netns", "exec", "ns"]`; empty for none) and waits
    /// until it answers `/metrics`.
    #[must_use]
    pub fn start(
        prefix: &[&str],
        profile: &str,
        addr: std::net::SocketAddr,
        extra: &[&str],
    ) -> Self {
        let bin = inferscope_bin();
        let listen = addr.to_string();
        let mut argv: Vec<&std::ffi::OsStr> = prefix.iter().map(std::ffi::OsStr::new).collect();
        argv.push(bin.as_os_str());
        // A small vector corpus: the index is built at start, which takes a minute unoptimised.
        // An empty profile leaves the choice to `extra` (e.g. `--config FILE`).
        argv.push(std::ffi::OsStr::new("sim"));
        if !profile.is_empty() {
            argv.push(std::ffi::OsStr::new("--profile"));
            argv.push(std::ffi::OsStr::new(profile));
        }
        for a in ["--listen", &listen, "--corpus-size", "200"] {
            argv.push(std::ffi::OsStr::new(a));
        }
        argv.extend(extra.iter().map(std::ffi::OsStr::new));
        let mut child = std::process::Command::new(argv[0])
            .args(&argv[1..])
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {argv:?}: {e}"));
        wait_ready(
            &mut child,
            addr,
            "/metrics",
            "vllm:",
            &format!("the sim {argv:?}"),
        );
        Self { child, addr }
    }

    /// Its process id (the prefix commands exec, so this is the sim's own).
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Base URL.
    #[must_use]
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Requests the sim has started so far (`vllm:prompt_tokens_total` > 0 means at least one).
    #[must_use]
    pub fn prompt_tokens(&self) -> f64 {
        http_get(self.addr, "/metrics").map_or(0.0, |b| {
            b.lines()
                .filter(|l| l.starts_with("vllm:prompt_tokens_total"))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        })
    }

    /// Blocks until the sim has seen its first request (the load generator started).
    pub fn wait_for_load(&self, within: std::time::Duration) {
        let deadline = std::time::Instant::now() + within;
        while self.prompt_tokens() <= 0.0 {
            assert!(
                std::time::Instant::now() < deadline,
                "no request reached the sim on {} within {within:?}",
                self.addr
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs a command, panicking with its output when it fails.
pub fn sh(argv: &[&str]) {
    let out = std::process::Command::new(argv[0])
        .args(&argv[1..])
        .output()
        .unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    assert!(
        out.status.success(),
        "{argv:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A network namespace joined to this one by a veth pair, deleted (with the pair) when
/// dropped. The host end is `HOST_ADDR`, the namespace end `NS_ADDR`.
pub struct NetNs {
    /// Namespace name (`ip netns exec NAME ...`).
    pub name: String,
    /// Host-side veth device.
    pub host_dev: String,
    /// Namespace-side veth device.
    pub ns_dev: String,
}

impl NetNs {
    /// Address of the host end.
    pub const HOST_ADDR: [u8; 4] = [10, 213, 7, 1];
    /// Address of the namespace end.
    pub const NS_ADDR: [u8; 4] = [10, 213, 7, 2];

    /// Creates the namespace and the pair, both ends up with their addresses.
    #[must_use]
    pub fn create(tag: &str) -> Self {
        Self::create_in(tag, [10, 213, 7])
    }

    /// Like [`NetNs::create`] on another /24 (`NET.1` host end, `NET.2` namespace end), for a
    /// test that must not share addresses with tests running at the same time.
    #[must_use]
    pub fn create_in(tag: &str, net: [u8; 3]) -> Self {
        // Several namespaces of one test get pairs of their own (names of at most 15 bytes).
        static PAIRS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let prefix = net.map(|o| o.to_string()).join(".");
        let (host_cidr, ns_cidr) = (format!("{prefix}.1/24"), format!("{prefix}.2/24"));
        let name = format!("isc-{tag}-{}", std::process::id());
        let n = PAIRS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 100;
        let host_dev = format!("ish{}x{n}", std::process::id() % 100_000);
        let ns_dev = format!("isn{}x{n}", std::process::id() % 100_000);
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &name])
            .output();
        sh(&["ip", "netns", "add", &name]);
        let me = Self {
            name,
            host_dev,
            ns_dev,
        };
        let (n, h, d) = (&me.name, &me.host_dev, &me.ns_dev);
        sh(&["ip", "link", "add", h, "type", "veth", "peer", "name", d]);
        sh(&["ip", "link", "set", d, "netns", n]);
        sh(&["ip", "addr", "add", &host_cidr, "dev", h]);
        sh(&["ip", "link", "set", h, "up"]);
        sh(&[
            "ip", "netns", "exec", n, "ip", "addr", "add", &ns_cidr, "dev", d,
        ]);
        sh(&["ip", "netns", "exec", n, "ip", "link", "set", d, "up"]);
        sh(&["ip", "netns", "exec", n, "ip", "link", "set", "lo", "up"]);
        me
    }

    /// Limits both directions of the pair with `tc qdisc tbf` (`rate` such as `2mbit`).
    pub fn shape(&self, rate: &str) {
        let tbf = [
            "root", "tbf", "rate", rate, "burst", "32kbit", "latency", "400ms",
        ];
        let mut host = vec!["tc", "qdisc", "add", "dev", &self.host_dev];
        host.extend(tbf);
        sh(&host);
        let mut ns = vec![
            "ip",
            "netns",
            "exec",
            &self.name,
            "tc",
            "qdisc",
            "add",
            "dev",
            &self.ns_dev,
        ];
        ns.extend(tbf);
        sh(&ns);
    }

    /// Runs `f` on a new thread that has joined the namespace (threads have their own network
    /// namespace; the rest of the process stays where it is).
    pub fn spawn_inside<F: FnOnce() + Send + 'static>(&self, f: F) -> std::thread::JoinHandle<()> {
        let path = format!("/var/run/netns/{}", self.name);
        std::thread::spawn(move || {
            use std::os::fd::AsRawFd as _;
            let ns = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            // SAFETY: setns on a valid namespace fd; affects only this thread.
            let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
            f();
        })
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["link", "del", &self.host_dev])
            .output();
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// A loopback HTTP server that answers every POST with 200 and hands over its body.
#[must_use]
pub fn webhook_server() -> (String, std::sync::mpsc::Receiver<String>) {
    use std::io::{BufRead as _, Read as _, Write as _};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", l.local_addr().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let mut r = std::io::BufReader::new(s.try_clone().unwrap());
            let mut len = 0usize;
            let mut first = String::new();
            r.read_line(&mut first).unwrap();
            loop {
                let mut line = String::new();
                if r.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
                    break;
                }
                if let Some((k, v)) = line.split_once(':')
                    && k.eq_ignore_ascii_case("content-length")
                {
                    len = v.trim().parse().unwrap();
                }
            }
            let mut body = vec![0; len];
            r.read_exact(&mut body).unwrap();
            assert!(first.starts_with("POST /hook "), "{first}");
            let _ =
                s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            let _ = tx.send(String::from_utf8(body).unwrap());
        }
    });
    (url, rx)
}

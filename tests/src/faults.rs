//! Targets and faults the project did not write into its simulator: an OpenAI-compatible server
//! without `/metrics` (`tests/servers/openai_nometrics.py`), and random packet loss made by
//! nftables (`numgen random`), on loopback or inside a test network namespace.

use std::{
    net::SocketAddr,
    path::PathBuf,
    process::Child,
    time::{Duration, Instant},
};

use crate::{http_get, sh};

/// How the Python server writes small answers.
#[derive(Clone, Copy, Debug)]
pub enum Writes {
    /// Nagle's algorithm on (Python's `http.server` default): a small write waits for the ACK
    /// of the one before, up to the client's delayed-ACK timer (~40 ms).
    Nagle,
    /// `TCP_NODELAY`, as asyncio servers (uvicorn, so vLLM) set it.
    NoDelay,
}

/// How the Python server holds its KV on the CUDA stand-in (`openai_nometrics.py --alloc`).
#[derive(Clone, Copy, Debug)]
pub enum Alloc {
    /// Per request, through a caching allocator that frees what it keeps and retries once on
    /// out-of-memory (an eager `PyTorch` engine).
    AsYouGo,
    /// One pool reserved at start; requests wait for room in it (vLLM, `SGLang`).
    UpFront,
}

/// The Python server without `/metrics`, killed when dropped.
pub struct NoMetricsServer {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl NoMetricsServer {
    /// Starts it under `prefix` (e.g. `["ip", "netns", "exec", NS]`) with at most `slots`
    /// requests admitted at once and `token_ms` per generated token; waits until it answers.
    #[must_use]
    pub fn start(
        prefix: &[&str],
        addr: SocketAddr,
        slots: u32,
        token_ms: f64,
        writes: Writes,
    ) -> Self {
        let slots = slots.to_string();
        let token_ms = token_ms.to_string();
        let mut opts = vec!["--slots", &slots, "--token-ms", &token_ms];
        if matches!(writes, Writes::NoDelay) {
            opts.push("--nodelay");
        }
        Self::start_with(prefix, addr, &opts)
    }

    /// An engine on a stand-in device (`tests/engine/libcuda_standin.c` built as
    /// `libcuda.so.1`, which inferscope hooks as the driver) of `device_mib`: `weights_mib` held
    /// from the start, each request's KV at `kib_per_token` held as `alloc` says; `slots`
    /// requests at once, `token_ms` per token, `TCP_NODELAY`.
    #[must_use]
    pub fn start_on_device(
        addr: SocketAddr,
        slots: u32,
        token_ms: f64,
        alloc: Alloc,
        [device_mib, weights_mib, kib_per_token]: [u32; 3],
    ) -> Self {
        let lib = standin_libcuda();
        let n = |v: u32| v.to_string();
        let alloc = match alloc {
            Alloc::AsYouGo => "as-you-go",
            Alloc::UpFront => "up-front",
        };
        Self::start_with(
            &[],
            addr,
            &[
                "--slots",
                &n(slots),
                "--token-ms",
                &token_ms.to_string(),
                "--nodelay",
                "--cuda",
                &lib.display().to_string(),
                "--device-mib",
                &n(device_mib),
                "--weights-mib",
                &n(weights_mib),
                "--kib-per-token",
                &n(kib_per_token),
                "--alloc",
                alloc,
            ],
        )
    }

    /// A synchronous worker: one connection at a time over HTTP/1.0, the other requests wait
    /// unread in the listen backlog; `token_ms` per generated token.
    #[must_use]
    pub fn start_sync(prefix: &[&str], addr: SocketAddr, token_ms: f64) -> Self {
        Self::start_with(
            prefix,
            addr,
            &["--sync", "--token-ms", &token_ms.to_string()],
        )
    }

    fn start_with(prefix: &[&str], addr: SocketAddr, opts: &[&str]) -> Self {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("servers/openai_nometrics.py");
        let mut argv: Vec<String> = prefix.iter().map(|s| (*s).to_owned()).collect();
        argv.extend([
            "python3".to_owned(),
            script.display().to_string(),
            "--listen".to_owned(),
            addr.to_string(),
        ]);
        argv.extend(opts.iter().map(|s| (*s).to_owned()));
        let child = std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {argv:?}: {e}"));
        let mut me = Self { child, addr };
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while http_get(addr, "/v1/models").is_none() {
            if let Some(st) = me.child.try_wait().expect("try_wait") {
                panic!("{argv:?} exited at start: {st}");
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{argv:?} did not answer on {addr}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        me
    }

    /// Base URL.
    #[must_use]
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Its process id (the prefix commands exec, so this is the server's own).
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for NoMetricsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The CUDA stand-in (`tests/engine/libcuda_standin.c`) built as `libcuda.so.1` in a folder of
/// this process's, once.
fn standin_libcuda() -> PathBuf {
    static LIB: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    LIB.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("inferscope-standin-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        let lib = dir.join("libcuda.so.1");
        let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("engine/libcuda_standin.c");
        let st = std::process::Command::new("cc")
            .args(["-O2", "-shared", "-fPIC", "-pthread", "-o"])
            .arg(&lib)
            .arg(&src)
            .status()
            .expect("cc (gcc) is needed");
        assert!(st.success(), "building the CUDA stand-in failed");
        lib
    })
    .clone()
}

/// Holds a fault through the peak of a run whose load began at `began` (within a poll): `make`
/// is called at `began + BASELINE`, and what it made is dropped half a second before the peak
/// ends, whatever making it took, so none of it reaches the next phase. (A fault removed late
/// is the next phase's too: a SYN lost in those last ms costs its request a 1 s
/// retransmission there.)
pub fn during_peak<F>(began: Instant, make: impl FnOnce() -> F) {
    let at = |d: Duration| {
        let t = began + d;
        std::thread::sleep(t.saturating_duration_since(Instant::now()));
    };
    at(crate::explain::BASELINE);
    let fault = make();
    at(crate::explain::BASELINE + crate::explain::PEAK.saturating_sub(Duration::from_millis(500)));
    drop(fault);
}

/// An nftables table that drops a share of packets at random, deleted when dropped.
pub struct RandomLoss {
    table: String,
    netns: Option<String>,
}

impl RandomLoss {
    /// Drops `percent`% of the TCP segments from `sport` (the server's answers) as they arrive,
    /// on every interface of this namespace (loopback included). On input, not output: a
    /// segment dropped on output is an error to the sender, which sends it again as new data
    /// (no retransmission), unlike a segment lost on the way.
    #[must_use]
    pub fn from_port(sport: u16, percent: u32) -> Self {
        Self::install(None, "input", &format!("tcp sport {sport}"), percent)
    }

    /// Drops `percent`% of the TCP segments in both directions on `dev` inside namespace
    /// `netns` (requests and answers alike).
    #[must_use]
    pub fn on_device(netns: &str, dev: &str, percent: u32) -> Self {
        let me = Self::install(
            Some(netns),
            "output",
            &format!("oifname \"{dev}\" meta l4proto tcp"),
            percent,
        );
        me.rule(
            "input",
            &format!("iifname \"{dev}\" meta l4proto tcp"),
            percent,
        );
        me
    }

    fn install(netns: Option<&str>, hook: &str, matcher: &str, percent: u32) -> Self {
        let me = Self {
            table: format!("inferscope_loss_{}", std::process::id()),
            netns: netns.map(str::to_owned),
        };
        me.nft(&format!("add table inet {}", me.table));
        me.rule(hook, matcher, percent);
        me
    }

    fn rule(&self, hook: &str, matcher: &str, percent: u32) {
        let t = &self.table;
        self.nft(&format!(
            "add chain inet {t} {hook} {{ type filter hook {hook} priority 0; policy accept; }}"
        ));
        self.nft(&format!(
            "add rule inet {t} {hook} {matcher} numgen random mod 100 < {percent} drop"
        ));
    }

    fn nft(&self, cmd: &str) {
        let mut argv: Vec<&str> = Vec::new();
        if let Some(ns) = &self.netns {
            argv.extend(["ip", "netns", "exec", ns]);
        }
        argv.extend(["nft", cmd]);
        sh(&argv);
    }
}

impl Drop for RandomLoss {
    fn drop(&mut self) {
        let mut argv: Vec<&str> = Vec::new();
        if let Some(ns) = &self.netns {
            argv.extend(["ip", "netns", "exec", ns]);
        }
        argv.extend(["nft", "delete", "table", "inet", &self.table]);
        let _ = std::process::Command::new(argv[0])
            .args(&argv[1..])
            .output();
    }
}

/// A cgroup-v1 `cpu` group holding a process, removed when dropped (the process moves back to
/// the root group first).
pub struct CpuQuota {
    dir: PathBuf,
}

impl CpuQuota {
    /// Moves process `pid` (all its threads) into a new group with no limit yet.
    #[must_use]
    pub fn holding(pid: u32) -> Self {
        let dir = PathBuf::from(format!(
            "/sys/fs/cgroup/cpu/inferscope-test-{}",
            std::process::id()
        ));
        let _ = std::fs::create_dir(&dir);
        std::fs::write(dir.join("cgroup.procs"), pid.to_string())
            .unwrap_or_else(|e| panic!("moving {pid} into {}: {e}", dir.display()));
        Self { dir }
    }

    /// Limits the group to `percent`% of one CPU (CFS bandwidth: quota per 100 ms period).
    pub fn limit(&self, percent: u32) {
        std::fs::write(self.dir.join("cpu.cfs_period_us"), "100000").unwrap();
        std::fs::write(
            self.dir.join("cpu.cfs_quota_us"),
            (percent * 1000).to_string(),
        )
        .unwrap();
    }
}

impl Drop for CpuQuota {
    fn drop(&mut self) {
        let _ = std::fs::write(self.dir.join("cpu.cfs_quota_us"), "-1");
        if let Ok(procs) = std::fs::read_to_string(self.dir.join("cgroup.procs")) {
            for p in procs.lines() {
                let _ = std::fs::write("/sys/fs/cgroup/cpu/cgroup.procs", p);
            }
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

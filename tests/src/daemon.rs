//! `inferscope daemon` started by a test: its ports, its HTTP answers and its log.

use std::{
    net::SocketAddr,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;

use crate::{explain::loopback, free_port, http_get, inferscope_bin};

/// `inferscope daemon` as its own process, killed when dropped.
pub struct Daemon {
    child: Child,
    /// Where it serves `/metrics` and `/api/v1/...`.
    pub metrics: SocketAddr,
    /// Its control API.
    pub api: SocketAddr,
    /// Where its log (stderr) goes.
    log: PathBuf,
}

impl Daemon {
    /// `inferscope daemon ARGS` with a 1 s window, on free loopback ports; waits until
    /// `/metrics` answers.
    #[must_use]
    pub fn start(args: &[&str]) -> Self {
        let metrics = loopback();
        let api = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let log = std::env::temp_dir().join(format!(
            "inferscope-daemon-{}-{}.log",
            std::process::id(),
            metrics.port()
        ));
        let child = Command::new(inferscope_bin())
            .args(["daemon", "--interval", "1s"])
            .args(args)
            .args(["--metrics-listen", &metrics.to_string()])
            .args(["--api-listen", &api.to_string(), "--duration", "180s"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("the daemon's log file"))
            .spawn()
            .expect("spawn inferscope daemon");
        let mut d = Self {
            child,
            metrics,
            api,
            log,
        };
        let deadline = Instant::now() + Duration::from_mins(1);
        while http_get(metrics, "/metrics").is_none() {
            if let Some(st) = d.child.try_wait().unwrap() {
                panic!("inferscope daemon exited at start: {st}");
            }
            assert!(
                Instant::now() < deadline,
                "the daemon did not serve /metrics"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        d
    }

    /// Its process id.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its resident memory (`VmRSS`, KiB) and CPU time so far (ms).
    #[must_use]
    pub fn cost(&self) -> (u64, f64) {
        let pid = self.pid();
        let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))?
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            })
            .unwrap_or(0);
        (rss, inferscope::collect::procfs::cpu_ms(pid).unwrap_or(0.0))
    }

    /// `GET path`; panics without an answer.
    #[must_use]
    pub fn get(&self, path: &str) -> String {
        http_get(self.metrics, path).unwrap_or_else(|| panic!("GET {path}: no answer"))
    }

    /// `/api/v1/report?phase=PHASE`, parsed.
    #[must_use]
    pub fn report(&self, phase: &str) -> Value {
        let body = self.get(&format!("/api/v1/report?phase={phase}"));
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("report {phase}: {e}: {body}"))
    }

    /// What it logged so far.
    #[must_use]
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM; the daemon must stop by itself, cleanly.
    pub fn stop(mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                assert!(st.success(), "the daemon exited with {st} on SIGTERM");
                return;
            }
            assert!(Instant::now() < deadline, "the daemon ignored SIGTERM");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The Python generator (`tests/clients/stream_marks.py`, Debian's python3 and nothing else)
/// running `phases` (`NAME:SECONDS:RATE`) against `target` with `extra` flags
/// (`--output-tokens N`, `--vector`, `--event`), marking each phase on `d`'s control API as a
/// k6 or guidellm run would. Its stdout is piped.
#[must_use]
pub fn generator(target: &str, d: &Daemon, phases: &[&str], extra: &[&str]) -> Child {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("clients/stream_marks.py");
    Command::new("python3")
        .arg(script)
        .arg(target)
        .arg(format!("http://{}", d.api))
        .args(phases)
        .args(extra)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the Python generator")
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

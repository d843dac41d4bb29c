//! A real Chroma server for tests: `chroma run` from the venv `cargo xtask setup` makes
//! (`target/venv`), on a free loopback port with its data in a temporary folder; and its
//! ingest (`tests/clients/chroma_adder.py`).

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use crate::{explain::loopback, http_get, missing_peer};

/// The venv's `bin` folder.
fn venv() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/venv/bin")
}

/// A `chroma run` child, killed when dropped.
pub struct Chroma {
    child: Child,
    addr: std::net::SocketAddr,
    dir: PathBuf,
}

impl Chroma {
    /// Starts Chroma and waits (90 s at most) until it answers its heartbeat; `None` (the
    /// test skipped, or failed under CI) when the venv has no `chromadb`.
    #[must_use]
    pub fn start(test: &str) -> Option<Self> {
        let bin = venv().join("chroma");
        if !bin.exists() {
            missing_peer(
                test,
                &format!(
                    "{} is missing (cargo xtask setup installs chromadb)",
                    bin.display()
                ),
            );
            return None;
        }
        let addr = loopback();
        let dir = std::env::temp_dir().join(format!("inferscope-chroma-{}", addr.port()));
        let _ = std::fs::remove_dir_all(&dir);
        let child = Command::new(&bin)
            .args([
                "run",
                "--host",
                "127.0.0.1",
                "--port",
                &addr.port().to_string(),
            ])
            .arg("--path")
            .arg(&dir)
            .env("ANONYMIZED_TELEMETRY", "False")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
        let me = Self { child, addr, dir };
        let deadline = Instant::now() + Duration::from_secs(90);
        while http_get(addr, "/api/v2/heartbeat").is_none_or(|b| !b.contains("heartbeat")) {
            assert!(
                Instant::now() < deadline,
                "chroma did not answer within 90 s"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
        Some(me)
    }

    /// Its base URL.
    #[must_use]
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Starts adding `count` vectors of `dimensions` to `collection`, in batches of 1000, once
    /// it holds `seeded` vectors and `after` more has passed: an ingest under the searches.
    #[must_use]
    pub fn ingest(
        &self,
        collection: &str,
        dimensions: u32,
        count: u32,
        seeded: u32,
        after: Duration,
    ) -> Child {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("clients/chroma_adder.py");
        Command::new(venv().join("python"))
            .arg(script)
            .args([
                &self.url(),
                collection,
                &dimensions.to_string(),
                &count.to_string(),
            ])
            .args(["--seeded", &seeded.to_string()])
            .args(["--after", &after.as_secs_f64().to_string()])
            .spawn()
            .expect("spawn the Chroma ingest")
    }
}

impl Drop for Chroma {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

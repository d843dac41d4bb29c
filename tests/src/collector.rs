//! An OTLP collector for tests: `tests/servers/otlp_collector.py`, which decodes what it
//! receives with the OpenTelemetry project's own protobuf definitions (`opentelemetry-proto`,
//! in the venv `cargo xtask setup` makes), and answers the spans and metrics it kept as JSON.

use std::{
    net::SocketAddr,
    path::PathBuf,
    process::{Child, Command},
};

use serde_json::Value;

use crate::{explain::loopback, http_get, missing_peer, wait_ready};

/// The collector process, killed when dropped.
pub struct Collector {
    child: Child,
    addr: SocketAddr,
}

impl Collector {
    /// Starts the collector on a free loopback port; `None` (the test skipped, or failed
    /// under CI) when the venv has no `opentelemetry-proto`.
    #[must_use]
    pub fn start(test: &str) -> Option<Self> {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let python = root.join("../target/venv/bin/python");
        let has = Command::new(&python)
            .args(["-c", "import opentelemetry.proto"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !has {
            missing_peer(
                test,
                &format!(
                    "{} cannot import opentelemetry.proto (cargo xtask setup installs it)",
                    python.display()
                ),
            );
            return None;
        }
        let addr = loopback();
        let mut child = Command::new(&python)
            .arg(root.join("servers/otlp_collector.py"))
            .args(["--port", &addr.port().to_string()])
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", python.display()));
        wait_ready(&mut child, addr, "/health", "ok", "the OTLP collector");
        Some(Self { child, addr })
    }

    /// Its OTLP/HTTP endpoint (the base URL: `/v1/traces` is added by the exporter).
    #[must_use]
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The spans received so far.
    #[must_use]
    pub fn spans(&self) -> Vec<Value> {
        let body = http_get(self.addr, "/spans").expect("the collector answers /spans");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("/spans: {e}: {body}"))
    }
}

impl Collector {
    /// The newest point of each metric series received so far.
    #[must_use]
    pub fn metrics(&self) -> Vec<Value> {
        let body = http_get(self.addr, "/metrics").expect("the collector answers /metrics");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("/metrics: {e}: {body}"))
    }

    /// The point of metric `name` whose attributes include every one of `attrs`.
    #[must_use]
    pub fn point(&self, name: &str, attrs: &[(&str, &str)]) -> Option<Value> {
        self.metrics()
            .into_iter()
            .find(|p| p["name"] == name && attrs.iter().all(|(k, v)| p["attributes"][*k] == *v))
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

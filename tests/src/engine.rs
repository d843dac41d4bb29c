//! llama.cpp's `llama-server` (a production inference engine that runs on CPUs) with the
//! random-weight model `cargo xtask setup` writes: both under `target/engine/`.

use std::{
    net::SocketAddr,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Duration,
};

use crate::{http_get, http_post_json, wait_ready};

/// `target/engine` of the workspace (where `cargo xtask setup` builds the engine).
fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/engine")
}

/// The built server and the model, or why they are not there.
fn paths() -> Result<(PathBuf, PathBuf), String> {
    let (bin, model) = (
        dir().join("build/bin/llama-server"),
        dir().join("model.gguf"),
    );
    if bin.is_file() && model.is_file() {
        Ok((bin, model))
    } else {
        Err(format!(
            "{} or {} is missing: cargo xtask setup builds them (cargo xtask test runs a \
             test that needs them only if its name holds `llama`)",
            bin.display(),
            model.display()
        ))
    }
}

/// Whether the engine is built; when it is not, the calling test is skipped, saying why (and
/// fails under `CI=true`: [`crate::missing_peer`]). A test that calls this has `llama` in its
/// name: `cargo xtask test` runs those once the engine is built, the others while it builds.
#[must_use]
pub fn built_or_skip(test: &str) -> bool {
    match paths() {
        Ok(_) => true,
        Err(why) => {
            crate::missing_peer(test, &why);
            false
        }
    }
}

/// How to start the server.
#[derive(Debug, Clone)]
pub struct Config {
    /// `--parallel`: sequences decoded together (slots).
    pub slots: u32,
    /// `--ctx-size`: KV cache in tokens, split between the slots unless `unified`.
    pub ctx: u32,
    /// `--kv-unified`: one KV pool shared by every slot.
    pub unified: bool,
    /// `--threads`: compute threads of the decode loop.
    pub threads: u32,
    /// `--threads-http`: threads serving HTTP; each open stream holds one (and llama-server
    /// closes every connection after a stream), so a new request waits unread when all are
    /// busy.
    pub http_threads: u32,
}

impl Config {
    /// `slots` slots of 1,024 tokens each, split, on one compute thread.
    #[must_use]
    pub fn slots(slots: u32) -> Self {
        Self {
            slots,
            ctx: 1024 * slots,
            unified: false,
            threads: 1,
            http_threads: 4,
        }
    }
}

/// A running `llama-server --metrics`, killed when dropped.
pub struct LlamaServer {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
}

/// The name the server gives the model in `/v1/models` (`--alias`).
pub const MODEL: &str = "random-llama";

impl LlamaServer {
    /// Starts the server under `prefix` (e.g. `["nice", "-n", "-10"]`, or `ip netns exec`) on
    /// `addr`, and waits until `/health` says it is ready.
    #[must_use]
    pub fn start(prefix: &[&str], addr: SocketAddr, cfg: &Config) -> Self {
        let (bin, model) = paths().unwrap_or_else(|e| panic!("{e}"));
        let mut cmd = Command::new(prefix.first().map_or(bin.as_os_str(), std::ffi::OsStr::new));
        if !prefix.is_empty() {
            cmd.args(&prefix[1..]).arg(&bin);
        }
        cmd.arg("--model")
            .arg(&model)
            .args(["--alias", MODEL, "--host"])
            .arg(addr.ip().to_string())
            .args(["--port", &addr.port().to_string()])
            .args(["--parallel", &cfg.slots.to_string()])
            .args(["--ctx-size", &cfg.ctx.to_string()])
            .args(["--threads", &cfg.threads.to_string()])
            .args(["--threads-http", &cfg.http_threads.to_string()])
            .args(["--metrics", "--no-webui"])
            .arg(if cfg.unified {
                "--kv-unified"
            } else {
                "--no-kv-unified"
            })
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
        wait_ready(&mut child, addr, "/health", "ok", "llama-server");
        Self { child, addr }
    }

    /// Its process id (the prefix commands exec).
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Base URL.
    #[must_use]
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// One of its own `llamacpp:` metrics now.
    #[must_use]
    pub fn metric(&self, name: &str) -> Option<f64> {
        let body = http_get(self.addr, "/metrics")?;
        body.lines()
            .find(|l| l.starts_with(&format!("llamacpp:{name} ")))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    }
}

/// How fast the engine runs on this machine, by its own `timings`, at batch size one. Machines
/// differ by 5x (a token took 1.6 ms on one of these 2-core machines, about 7 ms on another), so
/// a case whose mechanism needs requests to overlap sizes its load by this.
#[derive(Debug, Clone, Copy)]
pub struct Speed {
    /// Prefill of a 128-token prompt.
    pub prompt: Duration,
    /// One decode step of one sequence.
    pub token: Duration,
}

impl Speed {
    /// How long a request of a 128-token prompt and `output_tokens` takes alone.
    #[must_use]
    pub fn request(&self, output_tokens: u32) -> Duration {
        self.prompt + self.token * output_tokens
    }

    /// How many output tokens make a request of a 128-token prompt last `d` alone.
    #[must_use]
    pub fn tokens_lasting(&self, d: Duration) -> u32 {
        let steps = d.saturating_sub(self.prompt).as_secs_f64() / self.token.as_secs_f64();
        // Saturating float-to-int cast: a whole number of tokens, at least one.
        #[expect(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let n = steps.round().max(1.0) as u32;
        n
    }
}

impl LlamaServer {
    /// Measures [`Speed`]: the fastest of three requests of 128 prompt words and 64 tokens
    /// (the first warms the engine up). Panics when the engine does not answer with timings.
    #[must_use]
    pub fn speed(&self) -> Speed {
        let prompt = "the ".repeat(127);
        let body = format!(
            r#"{{"prompt": "{prompt}", "n_predict": 64, "ignore_eos": true, "cache_prompt": false}}"#
        );
        let measure = || {
            let answer = http_post_json(self.addr, "/completion", &body)
                .unwrap_or_else(|| panic!("llama-server at {} did not answer", self.addr));
            let v: serde_json::Value = serde_json::from_str(&answer)
                .unwrap_or_else(|e| panic!("llama-server answered no JSON ({e}): {answer}"));
            let ms = |k: &str| {
                let ms = v["timings"][k]
                    .as_f64()
                    .unwrap_or_else(|| panic!("no timings.{k} in {answer}"));
                Duration::from_secs_f64(ms / 1e3)
            };
            Speed {
                prompt: ms("prompt_ms"),
                token: ms("predicted_per_token_ms"),
            }
        };
        let runs = [measure(), measure(), measure()];
        let token = runs.iter().map(|s| s.token).min().expect("three runs");
        let prompt = runs.iter().map(|s| s.prompt).min().expect("three runs");
        let speed = Speed { prompt, token };
        println!(
            "llama-server speed: prefill of 128 tokens {:.1} ms, {:.2} ms a token",
            prompt.as_secs_f64() * 1e3,
            token.as_secs_f64() * 1e3
        );
        speed
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

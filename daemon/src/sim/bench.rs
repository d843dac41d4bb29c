//! The simulator's own overhead: how many streamed tokens per second it serves over loopback
//! with a zero-cost model, optionally with everything (server, engine, client) pinned to one
//! CPU. `cargo xtask bench` prints it; the goal is >= 20,000 tokens/s on one core.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::{client::legacy::Client, rt::TokioExecutor};

use super::{SimConfig, SimError, config::CostModel};

/// What the benchmark measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BenchResult {
    /// Concurrent streams.
    pub streams: usize,
    /// Tokens received by the client.
    pub tokens: u64,
    /// Wall time from the first request to the last `[DONE]`.
    pub elapsed: Duration,
    /// `tokens / elapsed`.
    pub tokens_per_sec: f64,
    /// Whether everything ran on one CPU.
    pub one_core: bool,
}

/// Benchmark failure.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The simulator did not start.
    #[error(transparent)]
    Sim(#[from] SimError),
    /// A request failed.
    #[error("benchmark request failed: {0}")]
    Request(String),
    /// Pinning to one CPU failed.
    #[error("cannot pin the benchmark to CPU {0}: {1}")]
    Pin(usize, std::io::Error),
}

fn pin_current_thread(cpu: usize) -> Result<(), BenchError> {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes inside it; pid 0 = this thread.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &raw const set)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(BenchError::Pin(cpu, std::io::Error::last_os_error()))
    }
}

/// Runs `streams` concurrent streaming completions of `tokens_per_stream` tokens each against
/// a zero-cost simulator on loopback. With `one_core`, the benchmark runs on a fresh thread
/// pinned to CPU 0 before anything is spawned, so the server, its engine and the client all
/// share that one CPU (threads inherit the affinity).
pub fn streamed_tokens_per_sec(
    streams: usize,
    tokens_per_stream: usize,
    one_core: bool,
) -> Result<BenchResult, BenchError> {
    std::thread::spawn(move || {
        if one_core {
            pin_current_thread(0)?;
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| BenchError::Sim(e.into()))?;
        let mut r = rt.block_on(run(streams, tokens_per_stream))?;
        r.one_core = one_core;
        Ok(r)
    })
    .join()
    .unwrap_or_else(|_| Err(BenchError::Request("benchmark thread panicked".to_owned())))
}

async fn run(streams: usize, tokens_per_stream: usize) -> Result<BenchResult, BenchError> {
    let mut cfg = SimConfig {
        cost: CostModel::zero(),
        ..SimConfig::default()
    };
    cfg.vector.corpus_size = 100;
    cfg.engine.max_num_seqs = streams.max(1);
    cfg.engine.max_waiting = streams.max(1);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(SimError::from)?;
    let srv = super::start(cfg, listener).await?;
    let url = format!("{}/v1/completions", srv.url());
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let body = format!(
        r#"{{"model":"inferscope-sim","prompt":"benchmark","max_tokens":{tokens_per_stream},"stream":true}}"#
    );
    let t0 = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..streams {
        let (client, url, body) = (client.clone(), url.clone(), body.clone());
        tasks.spawn(async move {
            let req = hyper::Request::post(url)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(body)))
                .map_err(|e| e.to_string())?;
            let resp = client.request(req).await.map_err(|e| e.to_string())?;
            if !resp.status().is_success() {
                return Err(format!("status {}", resp.status()));
            }
            let mut b = resp.into_body();
            let mut text = Vec::new();
            while let Some(f) = b.frame().await {
                if let Ok(d) = f.map_err(|e| e.to_string())?.into_data() {
                    text.extend_from_slice(&d);
                }
            }
            let needle = b"\"finish_reason\":null";
            Ok::<u64, String>(text.windows(needle.len()).filter(|w| w == needle).count() as u64)
        });
    }
    let mut tokens = 0;
    while let Some(r) = tasks.join_next().await {
        tokens += r
            .map_err(|e| BenchError::Request(e.to_string()))?
            .map_err(BenchError::Request)?;
    }
    let elapsed = t0.elapsed();
    if tokens != (streams * tokens_per_stream) as u64 {
        return Err(BenchError::Request(format!(
            "received {tokens} tokens, expected {}",
            streams * tokens_per_stream
        )));
    }
    srv.shutdown().await?;
    Ok(BenchResult {
        streams,
        tokens,
        elapsed,
        tokens_per_sec: tokens as f64 / elapsed.as_secs_f64(),
        one_core: false,
    })
}

//! The embedded **simulated** inference server (`inferscope sim`): the default target when no
//! GPU is around. It speaks the `OpenAI` API and exposes `vLLM`'s metrics; behind them a `vLLM`-like
//! engine (continuous batching, paged KV cache with preemption and prefix caching) spends real
//! CPU time per step and takes its memory from a simulated CUDA device whose driver-API symbols
//! the GPU probes can hook. See `profiles` for the named bottleneck profiles.
//!
//! Start it in-process with [`start`] (tests, demos), [`start_tls`] (over HTTPS) or [`serve`]
//! (runs until the future is dropped).

pub mod allocator;
pub mod bench;
pub mod completions;
pub mod config;
pub mod device;
pub mod engine;
pub mod exposition;
pub mod faults;
pub mod fixed;
pub mod format;
pub mod http;
mod https;
pub mod kv_cache;
pub mod lateness;
pub mod metrics;
pub mod openai;
pub mod profiles;
pub mod rerank;
pub mod sampler;
pub mod scheduler;
pub mod state;
pub mod stream;
pub mod tokenizer;
pub mod tools;
pub mod vector;

#[cfg(test)]
mod api_tests;
#[cfg(test)]
mod scheduler_tests;

use std::{net::SocketAddr, sync::Arc, time::Duration};

use tokio::{net::TcpListener, sync::oneshot, task::JoinHandle};

pub use config::SimConfig;
pub use profiles::{PROFILE_NAMES, profile};

use axum::serve::ListenerExt as _;
use engine::{Engine, EngineError, Shared};
use state::AppState;
use vector::VectorService;

/// Why the simulator could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// Bad configuration.
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    /// The engine did not start.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// Listener or server I/O.
    #[error("sim server I/O: {0}")]
    Io(#[from] std::io::Error),
    /// Building the vector index panicked.
    #[error("building the vector index failed")]
    Index,
}

/// A running simulator; dropping it shuts the server and its engine down.
#[derive(Debug)]
pub struct SimServer {
    addr: SocketAddr,
    tls: bool,
    state: Arc<AppState>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), std::io::Error>>>,
}

impl SimServer {
    /// The address it listens on.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Base URL, e.g. `http://127.0.0.1:8000` (`https://` when started with [`start_tls`]).
    #[must_use]
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// KV blocks in use right now.
    #[must_use]
    pub fn kv_used_blocks(&self) -> usize {
        self.state
            .shared
            .kv_used_blocks
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The `/metrics` text.
    #[must_use]
    pub fn metrics_text(&self) -> String {
        self.state.metrics_text()
    }

    /// Bytes allocated on the simulated device.
    #[must_use]
    pub fn device_used_bytes(&self) -> u64 {
        self.state.shared.device.used()
    }

    /// Stops accepting, lets open responses finish, and waits.
    pub async fn shutdown(mut self) -> Result<(), SimError> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            t.await
                .map_err(|e| std::io::Error::other(e.to_string()))??;
        }
        Ok(())
    }
}

impl Drop for SimServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// Starts the simulator on `listener` (bind port 0 for tests) and returns once it accepts.
pub async fn start(config: SimConfig, listener: TcpListener) -> Result<SimServer, SimError> {
    start_with(config, listener, None).await
}

/// Starts the simulator serving HTTPS with `tls` (see `crate::tls::server::server_config`).
pub async fn start_tls(
    config: SimConfig,
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
) -> Result<SimServer, SimError> {
    start_with(config, listener, Some(tls)).await
}

async fn start_with(
    config: SimConfig,
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> Result<SimServer, SimError> {
    config.validate()?;
    let addr = listener.local_addr()?;
    let shared = Arc::new(Shared::new(&config));
    let engine = if config.fixed.is_some() {
        None
    } else {
        Some(Arc::new(Engine::start(&config, shared.clone())?))
    };
    let vcfg = config.vector.clone();
    let vector = Arc::new(
        tokio::task::spawn_blocking(move || VectorService::new(&vcfg))
            .await
            .map_err(|_| SimError::Index)?,
    );
    let auto = config.vector.auto_rebuild_secs;
    let state = Arc::new(AppState::new(config, engine, shared, vector.clone()));
    let app = http::router(state.clone());
    let (stop, stopped) = oneshot::channel::<()>();
    let https = tls.is_some();
    let task = tokio::spawn(async move {
        let rebuilds = async {
            if auto == 0 {
                return std::future::pending().await;
            }
            let mut t = tokio::time::interval(Duration::from_secs(auto));
            t.tick().await;
            loop {
                t.tick().await;
                vector.start_rebuild();
            }
        };
        let stopped = async {
            let _ = stopped.await;
        };
        let served = async {
            if let Some(tls) = tls {
                https::serve(listener, app, tls, stopped).await
            } else {
                let listener = listener.tap_io(|tcp| {
                    // Token streams are many small writes: do not let Nagle batch them.
                    let _ = tcp.set_nodelay(true);
                });
                axum::serve(listener, app)
                    .with_graceful_shutdown(stopped)
                    .await
            }
        };
        tokio::select! {
            r = served => r,
            () = rebuilds => Ok(()),
        }
    });
    Ok(SimServer {
        addr,
        tls: https,
        state,
        stop: Some(stop),
        task: Some(task),
    })
}

/// Runs the simulator on `listener` until the server fails or the future is dropped.
pub async fn serve(config: SimConfig, listener: TcpListener) -> Result<(), SimError> {
    let mut srv = start(config, listener).await?;
    let task = srv.task.take().expect("task set by start");
    let res = task
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    drop(srv);
    Ok(res?)
}

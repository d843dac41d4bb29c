//! Inference-server `/metrics` (vLLM, `SGLang`, TGI) -> common signals per window.
//!
//! The pipeline, one module per step:
//!
//! 1. [`client`] GETs the exposition over HTTP/1 (hyper) at an interval and
//!    sends each [`client::Scrape`] over a bounded channel;
//! 2. [`prom_text`] parses the Prometheus text format 0.0.4 without ever
//!    panicking, keeping good lines and reporting bad ones by line number;
//! 3. [`mapping`] maps server-specific names to [`Signals`] (running, waiting,
//!    KV usage, preemptions, prefix-cache counters, token counters, queue
//!    time / TTFT / ITL histograms), detecting the server from the names;
//! 4. [`window`] turns successive [`Signals`] into [`WindowSignals`]: rates per
//!    second, per-window p50/p95/p99, gauge last/max.
//!
//! ```no_run
//! # async fn demo() -> Result<(), inferscope::scrape::ScrapeError> {
//! use inferscope::scrape::{ScrapeConfig, WindowBuilder, spawn};
//! let mut task = spawn(ScrapeConfig::new("http://127.0.0.1:8000"), 16)?;
//! let mut window = WindowBuilder::new();
//! while let Some(scrape) = task.rx.recv().await {
//!     if let Ok(signals) = scrape.signals {
//!         window.push(scrape.instant, signals);
//!     }
//!     if let Some(w) = window.finish() {
//!         println!("kv={:?} ttft={:?}", w.kv_usage, w.ttft);
//!     }
//! }
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

pub mod client;
pub mod engine_info;
pub mod error;
pub mod find;
pub mod mapping;
pub mod prom_text;
pub mod window;

pub use client::{Scrape, ScrapeConfig, ScrapeTask, Scraper, spawn};
pub use error::ScrapeError;
pub use mapping::{Histogram, ServerKind, SignalOptions, Signals};
pub use window::{GaugeWindow, LatencyWindow, WindowBuilder, WindowSignals};

//! inferscope: stress AI inference services and explain, from kernel evidence, why latency rose.
//!
//! Data flows one way: `probes -> collect -> attribute -> export`; see `docs/design.md`.

pub mod api;
pub mod atomic;
pub mod attribute;
pub mod clock;
pub mod collect;
pub mod daemon;
pub mod dial;
pub mod duration;
pub mod explain;
pub mod export;
pub mod gpu;
pub mod loadgen;
pub mod measure;
pub mod node;
pub mod probes;
pub mod quantile;
pub mod scrape;
pub mod sim;
pub mod target_url;
pub mod tls;
pub mod triggers;
pub mod workload;

//! inferscope: stress AI inference services and explain, from kernel evidence, why latency rose.
//!
//! Data flows one way: `probes -> collect -> attribute -> export`; see DESIGN.md.

pub mod collect;
pub mod loadgen;
pub mod probes;

//! Kernel events and samples -> time-windowed aggregates; procfs enrichment.

pub mod procfs;
pub mod runq;

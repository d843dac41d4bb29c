//! Kernel events and samples -> time-windowed aggregates; procfs enrichment.

pub mod cuda;
pub mod procfs;
pub mod runq;
pub mod timeline;

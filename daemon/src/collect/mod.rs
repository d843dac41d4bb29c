//! Kernel events and samples -> time-windowed aggregates; procfs enrichment.

pub mod accepts;
pub mod catalog;
pub mod cgroup;
pub mod cuda;
pub mod discover;
pub mod identity;
pub mod join;
pub mod kernel;
pub mod load;
pub mod load_fold;
pub mod pods;
pub mod procfs;
pub mod runq;
pub mod server;
pub mod session;
pub mod timeline;

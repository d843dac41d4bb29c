//! Per-phase summaries: load achieved, latencies, the share of windows per verdict, the
//! dominant verdict, and where the TTFT increase over the baseline went.

mod dominant;
mod measures;
mod onset;
mod overload;
mod saturated;
mod summarise;
mod summarise_one;
mod summary;

pub use summarise::summarise;
pub use summary::{
    CauseShare, DOMINANT_MIN_SHARE, MIN_CAUSE_WINDOWS, OVERLOAD_COMPLETED_SHARE, Overload,
    PhaseLatency, PhaseLoad, PhaseSummary,
};

//! What a run produced: each request's record, the phase's histograms and counts, SLOs and
//! their results, resilience (MSR), vector recall and index health, failures, shards and
//! their merge, and the stress report with its terminal table.
//!
//! The load generator writes these; collect, attribute, triggers and export read them. This
//! module depends on none of them.

pub mod confidence;
pub mod failures;
pub mod merge;
pub mod metrics;
pub mod pipeline;
pub mod prefix;
pub mod provenance;
pub mod record;
pub mod report;
pub mod resilience;
pub mod session;
pub mod shard;
pub mod slo;
pub mod steady;
pub mod summary;
pub mod table;
pub mod trace_context;
pub mod vector_health;

pub use record::{Endpoint, ErrorClass, RequestRecord};
pub use report::{PhaseReport, Stop, StopKind, StressReport};
pub use shard::Shard;

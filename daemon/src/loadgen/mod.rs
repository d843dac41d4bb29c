//! The embedded load generator behind `inferscope stress`.
//!
//! Open-loop (coordinated-omission correct) and closed-loop load against OpenAI-compatible
//! LLM endpoints, vector search and plain HTTP, described by a YAML scenario
//! ([`scenario::Scenario`], documented in `docs/stress.md`) and run as a [`Plan`]: the
//! scenario with the command line's flags over it, validated and resolved once.
//!
//! Running a scenario in-process and watching each request as it finishes:
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use inferscope::loadgen::{self, Options, Plan, scenario::overrides::Overrides};
//! let plan = Plan::from_file("examples/seed-matrix.yaml".as_ref(), &Overrides::default())?;
//! let (tx, mut rx) = tokio::sync::mpsc::channel(1024);
//! let opts = Options { observer: Some(tx), ..Options::new() };
//! let cancel = tokio_util::sync::CancellationToken::new();
//! tokio::spawn(async move { while let Some(rec) = rx.recv().await { let _ = rec.e2e_us(); } });
//! let report = loadgen::run(&plan, opts, cancel).await?;
//! println!("{}", report.table());
//! # Ok(()) }
//! ```

pub mod client;
pub mod engine;
pub mod knee;
pub mod scenario;

pub use engine::{Notes, Options, RunError, run};
pub use scenario::plan::{Plan, PlanError};
pub use scenario::{Scenario, ScenarioError};
// What a run returns, for the callers of `run`: the types themselves live in `measure`.
pub use crate::measure::{
    Endpoint, ErrorClass, PhaseReport, RequestRecord, Shard, Stop, StopKind, StressReport,
};

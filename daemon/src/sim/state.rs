//! The state one server's handlers share.

use std::sync::{Arc, atomic::AtomicU64};

use axum::extract::State;
use tokio::sync::Semaphore;

use super::{
    config::SimConfig,
    engine::{Engine, Shared},
    faults::Faults,
    metrics::ApiCounters,
    vector::VectorService,
};

/// State of one server, shared by all handlers.
#[derive(Debug)]
pub struct AppState {
    /// Configuration.
    pub cfg: SimConfig,
    /// The engine (absent in `fixed` mode).
    pub engine: Option<Arc<Engine>>,
    /// Metrics and counters.
    pub shared: Arc<Shared>,
    /// Vector search.
    pub vector: Arc<VectorService>,
    /// Fault injection.
    pub faults: Faults,
    /// Counters of the re-rank endpoint and of tool calls.
    pub counters: ApiCounters,
    /// Turns on the re-ranker's device (`rerank.concurrency` permits, first come first served).
    pub(crate) rerank_slots: Semaphore,
    pub(crate) next_id: AtomicU64,
}

impl AppState {
    /// Assembles the state.
    #[must_use]
    pub fn new(
        cfg: SimConfig,
        engine: Option<Arc<Engine>>,
        shared: Arc<Shared>,
        vector: Arc<VectorService>,
    ) -> Self {
        let faults = Faults::new(&cfg.faults, std::time::Instant::now());
        let rerank_slots = Semaphore::new(cfg.rerank.concurrency);
        Self {
            cfg,
            engine,
            shared,
            vector,
            faults,
            counters: ApiCounters::default(),
            rerank_slots,
            next_id: AtomicU64::new(1),
        }
    }

    /// The whole `/metrics` text: vLLM's names, the vector service, re-ranking and tool calls.
    #[must_use]
    pub fn metrics_text(&self) -> String {
        self.shared.metrics().render() + &self.vector.metrics_text() + &self.counters.render()
    }
}

pub(crate) type St = State<Arc<AppState>>;

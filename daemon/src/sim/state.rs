//! The state one server's handlers share.

use std::sync::{Arc, atomic::AtomicU64};

use axum::extract::State;

use super::{
    config::SimConfig,
    engine::{Engine, Shared},
    faults::Faults,
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
        Self {
            cfg,
            engine,
            shared,
            vector,
            faults,
            next_id: AtomicU64::new(1),
        }
    }
}

pub(crate) type St = State<Arc<AppState>>;

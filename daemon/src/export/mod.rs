//! Getting results out: OTLP, the Prometheus endpoint and the signal catalogue both publish,
//! and the run reports (JSON, HTML, terminal).

pub mod otlp;
pub mod prometheus;
pub mod report;
pub mod schema;

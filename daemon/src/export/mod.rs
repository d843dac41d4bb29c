//! Export: OTLP, the Prometheus endpoint, and the signal catalogue both publish.

pub mod otlp;
pub mod prometheus;
pub mod signals;

//! Getting results out: reports (JSON, HTML, terminal); OTLP and Prometheus live beside them.

pub mod report;

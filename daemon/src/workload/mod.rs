//! Workloads built from real query logs (`inferscope workload build`): embed each query,
//! cluster the embeddings with k-means, keep the queries nearest each centroid, and write them
//! as a stress dataset whose rows carry their `cluster`, a `temperature` and a `complexity`.
//!
//! - [`embed`]: the embeddings, local (hashed word n-grams with TF-IDF, the default) or from an
//!   OpenAI-compatible `/v1/embeddings` endpoint;
//! - [`cluster`]: k-means (`linfa-clustering`), seeded by k-means++ and by the groups of
//!   [`linkage`] (average linkage), the start of least inertia kept;
//! - [`build`](mod@build): reading the log, choosing representatives, the rows and the report.
//!
//! The same log, options and seed give byte-identical output.

pub mod build;
pub mod cluster;
pub mod embed;
pub mod linkage;

pub use build::{BuildError, BuildSpec, Built, build, read_queries};

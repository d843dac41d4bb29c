//! The vector APIs a phase can speak (`request.api`) and a phase's compiled vector settings:
//! how a query body is written, where the answer's ids are, which routes seed a collection.

use std::{fmt::Write as _, sync::Arc};

use bytes::Bytes;
use hyper::{Method, Uri};
use serde_json::{Map, Value, json};

use crate::loadgen::engine::vector::corpus::Corpus;
use crate::loadgen::scenario::body::{AnswerPaths, Vars, write_vector};
pub use crate::loadgen::scenario::vector::{ApiKind, CorpusSpec, InsertSpec, JsonApiSpec, Metric};

/// Chroma's default tenant and database (v2 API).
pub const CHROMA_BASE: &str = "/api/v2/tenants/default_tenant/databases/default_database";

/// A phase's vector settings, compiled; [`crate::loadgen::engine::vector::setup`] completes them before the run
/// (dimension, Chroma's collection id, the corpus).
#[derive(Debug)]
pub struct VectorPhase {
    /// Phase name (messages).
    pub phase: String,
    /// The API.
    pub api: ApiKind,
    /// Method of the search.
    pub method: Method,
    /// Search URI (Chroma's is set by setup, once the collection id is known).
    pub search: Uri,
    /// Chroma: the collection's URI (by id), where its `ef_search` is set.
    pub collection_uri: Option<Uri>,
    /// Ground-truth endpoint (without a corpus).
    pub exact_uri: Option<Uri>,
    /// Where the answer's ids are.
    pub paths: AnswerPaths,
    /// `request.json`.
    pub json: Option<JsonApiSpec>,
    /// The collection (Chroma, Qdrant).
    pub collection: String,
    /// Dimensions of query vectors (given, the corpus's, or the server's).
    pub dims: Option<usize>,
    /// `top_k`.
    pub top_k: usize,
    /// `ef_search`.
    pub ef_search: Option<u32>,
    /// `request.corpus`.
    pub corpus_spec: Option<CorpusSpec>,
    /// The corpus, once generated.
    pub corpus: Option<Arc<Corpus>>,
    /// Share of queries sampled for recall.
    pub recall_sample: f64,
    /// Qdrant: the universal query route (`path: .../points/query`) instead of `points/search`.
    pub qdrant_query: bool,
}

impl VectorPhase {
    /// The search URI.
    #[must_use]
    pub fn search_uri(&self) -> Uri {
        self.search.clone()
    }

    /// The body of a query: vector `q` or text `text`, plus `extra` fields (not for `json`).
    #[must_use]
    pub fn body(&self, q: Option<&[f32]>, text: Option<&str>, extra: Map<String, Value>) -> Bytes {
        let k = self.top_k;
        let mut body = Map::new();
        match self.api {
            ApiKind::Json => {
                let Some(j) = &self.json else {
                    return Bytes::new();
                };
                return Bytes::from(j.body.render(&Vars {
                    vector: q,
                    top_k: k,
                    ef_search: self.ef_search,
                    text,
                    ..Vars::default()
                }));
            }
            ApiKind::Sim => {
                match (q, text) {
                    (_, Some(t)) => body.insert("text".into(), json!(t)),
                    (q, None) => body.insert("vector".into(), json!(q.unwrap_or_default())),
                };
                body.insert("top_k".into(), json!(k));
                if let Some(ef) = self.ef_search {
                    body.insert("ef_search".into(), json!(ef));
                }
            }
            ApiKind::Chroma => {
                body.insert("query_embeddings".into(), json!([q.unwrap_or_default()]));
                body.insert("n_results".into(), json!(k));
                body.insert("include".into(), json!(["distances"]));
            }
            ApiKind::Qdrant => {
                let key = if self.qdrant_query { "query" } else { "vector" };
                body.insert(key.into(), json!(q.unwrap_or_default()));
                body.insert("limit".into(), json!(k));
                if let Some(ef) = self.ef_search {
                    body.insert("params".into(), json!({"hnsw_ef": ef}));
                }
                body.insert("with_payload".into(), json!(false));
            }
        }
        body.extend(extra);
        Bytes::from(Value::Object(body).to_string())
    }
}

/// Where Qdrant's universal query route (`POST /collections/{name}/points/query`) answers.
#[must_use]
pub fn qdrant_query_paths() -> AnswerPaths {
    AnswerPaths::fixed("$.result.points[*].id", "$.result.points[*].score")
}

/// A Chroma collection's routes.
#[must_use]
pub fn chroma_collections() -> String {
    format!("{CHROMA_BASE}/collections")
}

/// Chroma's distance names.
#[must_use]
pub fn chroma_space(m: Metric) -> &'static str {
    match m {
        Metric::L2 => "l2",
        Metric::Cosine => "cosine",
        Metric::Ip => "ip",
    }
}

/// Qdrant's distance names.
#[must_use]
pub fn qdrant_distance(m: Metric) -> &'static str {
    match m {
        Metric::L2 => "Euclid",
        Metric::Cosine => "Cosine",
        Metric::Ip => "Dot",
    }
}

/// Chroma's `add` body for rows `first..` of a flat slice.
#[must_use]
pub fn chroma_add_body(first: usize, rows: &[f32], dims: usize) -> String {
    let mut s = String::from("{\"ids\":[");
    let n = rows.len() / dims.max(1);
    for i in 0..n {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(s, "\"{}\"", first + i);
    }
    s.push_str("],\"embeddings\":[");
    for (i, row) in rows.chunks_exact(dims.max(1)).enumerate() {
        if i > 0 {
            s.push(',');
        }
        write_vector(&mut s, row);
    }
    s.push_str("]}");
    s
}

/// Qdrant's upsert body for rows `first..` of a flat slice.
#[must_use]
pub fn qdrant_points_body(first: usize, rows: &[f32], dims: usize) -> String {
    let mut s = String::from("{\"points\":[");
    for (i, row) in rows.chunks_exact(dims.max(1)).enumerate() {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(s, "{{\"id\":{},\"vector\":", first + i);
        write_vector(&mut s, row);
        s.push('}');
    }
    s.push_str("]}");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeding_bodies_are_json() {
        let rows = [1.0f32, 0.0, 0.5, 0.25];
        let c: Value = serde_json::from_str(&chroma_add_body(10, &rows, 2)).unwrap();
        assert_eq!(
            c,
            // Whole numbers are written without a fraction (valid JSON numbers).
            json!({"ids": ["10", "11"], "embeddings": [[1, 0], [0.5, 0.25]]})
        );
        let q: Value = serde_json::from_str(&qdrant_points_body(0, &rows, 2)).unwrap();
        assert_eq!(q["points"][1], json!({"id": 1, "vector": [0.5, 0.25]}));
    }
}

//! What a vector phase's `request` says: the API it speaks (`api`), the generic adapter's
//! templates (`json`) and the corpus the client inserts (`corpus`).

use serde::Deserialize;

use super::body::{AnswerPaths, BodyTemplate, InsertTemplate, JsonPath};

/// `request.api`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApiKind {
    /// `inferscope sim`: `POST /v1/vector/search {"vector"|"text", "top_k", "ef_search"}`.
    #[default]
    Sim,
    /// Chroma's v2 HTTP API (`chroma run`).
    Chroma,
    /// Qdrant's REST API (`POST /collections/{name}/points/search`).
    Qdrant,
    /// Any HTTP API, from `request.json`.
    Json,
}

impl ApiKind {
    /// The name used in messages.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            ApiKind::Sim => "sim",
            ApiKind::Chroma => "chroma",
            ApiKind::Qdrant => "qdrant",
            ApiKind::Json => "json",
        }
    }

    /// Where the built-in APIs put ids and scores (`json` has its own).
    #[must_use]
    pub fn paths(self) -> AnswerPaths {
        match self {
            ApiKind::Sim | ApiKind::Json => {
                AnswerPaths::fixed("$.results[*].id", "$.results[*].distance")
            }
            ApiKind::Chroma => AnswerPaths::fixed("$.ids[0]", "$.distances[0]"),
            ApiKind::Qdrant => AnswerPaths::fixed("$.result[*].id", "$.result[*].score"),
        }
    }
}

/// `request.json`: the generic adapter.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonApiSpec {
    /// The search body, with `${vector}`, `${top_k}`, `${ef_search}`, `${text}`.
    pub body: BodyTemplate,
    /// JSON path to the result ids, best first (e.g. `$.results[*].id`).
    pub ids: JsonPath,
    /// JSON path to their scores or distances (checked: one number per id).
    pub scores: Option<JsonPath>,
    /// How to insert `request.corpus` (without it the collection must already hold it).
    pub insert: Option<InsertSpec>,
}

/// `request.json.insert`: one request per batch of the corpus.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InsertSpec {
    /// Path under the target.
    pub path: String,
    /// Method (default POST).
    pub method: Option<String>,
    /// The body, with `${ids}` (strings), `${num_ids}` (numbers) and `${vectors}`.
    pub body: InsertTemplate,
}

/// Largest corpus held, in numbers (`vectors x dimensions`): 256 MiB of `f32`.
pub const MAX_CORPUS_FLOATS: usize = 64 << 20;

/// The distance a collection is created with. The corpus and the queries are unit vectors,
/// so all three rank neighbours the same way and the client's ground truth holds for each.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Squared Euclidean distance (Chroma `l2`, Qdrant `Euclid`).
    #[default]
    L2,
    /// Cosine distance (Chroma `cosine`, Qdrant `Cosine`).
    Cosine,
    /// Inner product (Chroma `ip`, Qdrant `Dot`).
    Ip,
}

/// `request.corpus`: what the client inserts and searches exactly.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CorpusSpec {
    /// Number of vectors (ids `0..vectors`).
    pub vectors: usize,
    /// Dimensions of each.
    pub dimensions: usize,
    /// Seed of the vectors (default: the scenario's `seed`, else 0).
    pub seed: Option<u64>,
    /// The collection's distance (default `l2`).
    #[serde(default)]
    pub metric: Metric,
    /// Insert the corpus before the run (default true); `false`: the collection already
    /// holds this corpus (inserted by an earlier run or phase with the same seed).
    #[serde(default = "yes")]
    pub insert: bool,
    /// Vectors per insert request (default 256).
    pub batch: Option<usize>,
}

fn yes() -> bool {
    true
}

impl CorpusSpec {
    /// What is wrong with the sizes, if anything.
    #[must_use]
    pub fn problem(&self) -> Option<String> {
        if self.vectors == 0 || self.dimensions == 0 {
            return Some("corpus vectors and dimensions must be above 0".into());
        }
        if self.dimensions > super::limits::HARD_MAX_DIMENSIONS {
            return Some(format!(
                "corpus dimensions must be at most {}",
                super::limits::HARD_MAX_DIMENSIONS
            ));
        }
        if self.vectors.saturating_mul(self.dimensions) > MAX_CORPUS_FLOATS {
            return Some(format!(
                "corpus of {} x {} numbers is above the limit of {MAX_CORPUS_FLOATS}: use fewer vectors",
                self.vectors, self.dimensions
            ));
        }
        if self.batch.is_some_and(|b| b == 0 || b > 100_000) {
            return Some("corpus batch must be 1..=100000".into());
        }
        None
    }
}

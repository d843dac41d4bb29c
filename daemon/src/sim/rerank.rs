//! `POST /v1/rerank`: the re-rank API vLLM, TEI, Jina and Cohere serve. Each document is scored
//! against the query by the cosine of their sets of words (lowercased alphanumeric runs): 1 when
//! they hold the same words, 0 when they share none, deterministic. A request costs the
//! [`CostModel`](super::config::CostModel)'s step time of its (query, document) pair tokens and
//! its documents, spent on a re-ranker device of its own that computes `rerank.concurrency`
//! requests at a time: under load requests wait their turn and latency grows.

use std::{collections::BTreeSet, sync::atomic::Ordering, time::Instant};

use axum::{
    Json,
    body::Bytes,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    completions::check_model,
    openai::{self, ApiError},
    state::{AppState, St},
    tokenizer,
};

/// A document: text, or an object with a `text` field.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Document {
    /// Plain text.
    Text(String),
    /// `{"text": ...}`.
    Object {
        /// The text.
        text: String,
    },
}

impl Document {
    /// Its text.
    #[must_use]
    pub fn text(&self) -> &str {
        match self {
            Self::Text(t) | Self::Object { text: t } => t,
        }
    }
}

/// `POST /v1/rerank` body.
#[derive(Debug, Clone, Deserialize)]
pub struct RerankRequest {
    /// Model name; the served model when absent.
    pub model: Option<String>,
    /// What the documents are ranked against.
    pub query: String,
    /// The documents.
    pub documents: Vec<Document>,
    /// Results to return, best first (all when absent).
    pub top_n: Option<usize>,
    /// Echo each result's document.
    pub return_documents: Option<bool>,
}

/// One scored document.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scored {
    /// Position in the request's `documents`.
    pub index: usize,
    /// Relevance in `0..=1`.
    pub score: f64,
}

fn words(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Relevance of `document` to `query`: the cosine of their word sets.
#[must_use]
pub fn relevance(query: &str, document: &str) -> f64 {
    let (q, d) = (words(query), words(document));
    if q.is_empty() || d.is_empty() {
        return 0.0;
    }
    let shared = q.intersection(&d).count();
    shared as f64 / ((q.len() * d.len()) as f64).sqrt()
}

/// The documents' scores, best first (ties by position), cut to `top_n`.
#[must_use]
pub fn rank(query: &str, documents: &[Document], top_n: usize) -> Vec<Scored> {
    let mut scored: Vec<Scored> = documents
        .iter()
        .enumerate()
        .map(|(index, d)| Scored {
            index,
            score: relevance(query, d.text()),
        })
        .collect();
    scored.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.index.cmp(&b.index)));
    scored.truncate(top_n);
    scored
}

/// Checks the request; returns the model name and how many results to return.
fn check(s: &AppState, r: &RerankRequest) -> Result<(String, usize), ApiError> {
    let model = match &r.model {
        Some(m) => {
            check_model(s, m)?;
            m.clone()
        }
        None => s.cfg.model.clone(),
    };
    if r.query.trim().is_empty() {
        return Err(ApiError::bad_request(
            "query must not be empty",
            Some("query"),
        ));
    }
    if r.documents.is_empty() {
        return Err(ApiError::bad_request(
            "documents must not be empty",
            Some("documents"),
        ));
    }
    match r.top_n {
        Some(0) => Err(ApiError::bad_request(
            "top_n must be at least 1",
            Some("top_n"),
        )),
        n => Ok((model, n.unwrap_or(usize::MAX).min(r.documents.len()))),
    }
}

/// Spends the re-ranker's compute time for `tokens` pair tokens of `documents` documents, in
/// turn with the other requests.
async fn compute(s: &AppState, tokens: usize, documents: usize) -> Result<(), ApiError> {
    let _turn = s
        .rerank_slots
        .acquire()
        .await
        .map_err(|_| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "the re-ranker stopped"))?;
    let t = s.cfg.cost.step_time(tokens, documents);
    if t.is_zero() {
        return Ok(());
    }
    if !s.cfg.rerank.on_cpu {
        tokio::time::sleep(t).await;
        return Ok(());
    }
    tokio::task::spawn_blocking(move || burn(t))
        .await
        .map_err(|_| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "the re-ranker failed"))
}

/// Keeps this thread on a CPU until it has used `t` of CPU time: under a CPU quota or beside
/// other work that takes longer than `t`.
fn burn(t: std::time::Duration) {
    let cpu = || {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid pointer to a timespec; the clock exists on every Linux.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &raw mut ts) };
        std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    };
    let until = cpu() + t;
    let mut x = 0u64;
    while cpu() < until {
        for i in 0..1000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
    }
}

/// The `POST /v1/rerank` handler.
pub(crate) async fn rerank(State(s): St, body: Bytes) -> Response {
    let t0 = Instant::now();
    let r: RerankRequest = match openai::parse(&body) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let (model, top_n) = match check(&s, &r) {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    let delay = s.faults.delay(t0);
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    if s.faults.inject_error() {
        return ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "injected fault").into_response();
    }
    let query_tokens = tokenizer::count(&r.query);
    let tokens: usize = r
        .documents
        .iter()
        .map(|d| query_tokens + tokenizer::count(d.text()))
        .sum();
    if let Err(e) = compute(&s, tokens, r.documents.len()).await {
        return e.into_response();
    }
    s.counters.reranked(r.documents.len());
    let with_documents = r.return_documents.unwrap_or(false);
    let results: Vec<Value> = rank(&r.query, &r.documents, top_n)
        .into_iter()
        .map(|x| {
            let mut v = json!({"index": x.index, "relevance_score": x.score});
            if with_documents {
                v["document"] = json!({"text": r.documents[x.index].text()});
            }
            v
        })
        .collect();
    let id = s.next_id.fetch_add(1, Ordering::Relaxed);
    Json(json!({
        "id": format!("rerank-sim{id:016x}"), "model": model,
        "usage": {"total_tokens": tokens}, "results": results,
    }))
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn docs(texts: &[&str]) -> Vec<Document> {
        texts
            .iter()
            .map(|t| Document::Text((*t).to_owned()))
            .collect()
    }

    #[test]
    fn relevance_is_the_cosine_of_word_sets() {
        assert!((relevance("KV cache", "the kv CACHE.") - 2.0 / 6f64.sqrt()).abs() < 1e-12);
        assert!((relevance("a b", "b a") - 1.0).abs() < 1e-12);
        assert!(relevance("a b", "c d").abs() < 1e-12);
        assert!(relevance("", "c d").abs() < 1e-12);
    }

    #[test]
    fn rank_sorts_best_first_and_cuts() {
        let d = docs(&[
            "nothing here",
            "kv cache eviction",
            "cache",
            "nothing there",
        ]);
        let r = rank("kv cache eviction policy", &d, 3);
        assert_eq!(r.iter().map(|x| x.index).collect::<Vec<_>>(), [1, 2, 0]);
        assert!(r[0].score > r[1].score && r[1].score > r[2].score);
    }
}

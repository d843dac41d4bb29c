//! HTTP routes: the OpenAI-compatible API, re-ranking, `/health`, `/metrics` and the vector
//! service.

use std::sync::Arc;

use axum::{
    Json, Router,
    body::Bytes,
    extract::State,
    http::{StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde::Deserialize;
use serde_json::json;

use super::{
    completions::{self, check_model},
    format,
    openai::{self, ApiError, EmbeddingInput, EmbeddingRequest},
    rerank,
    scheduler::Scheduler,
    state::{AppState, St},
    tokenizer, vector,
};

/// The router.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/health", get(|| async { StatusCode::OK }))
        .route("/v1/models", get(models))
        .route("/version", get(version))
        .route("/metrics", get(metrics))
        .route("/v1/chat/completions", post(completions::chat))
        .route("/v1/completions", post(completions::completions))
        .route("/v1/embeddings", post(embeddings))
        .route("/v1/rerank", post(rerank::rerank))
        .route("/v1/tools/{name}", post(super::tools::answer))
        .route("/reset_prefix_cache", post(reset_prefix_cache))
        .route("/v1/vector/search", post(vector_search))
        .route("/v1/vector/exact", post(vector_exact))
        .route("/v1/vector/rebuild", post(vector_rebuild))
        .route("/v1/vector/status", get(vector_status))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such route") })
        .with_state(state)
}

async fn models(State(s): St) -> Response {
    Json(json!({"object": "list", "data": [{
        "id": s.cfg.model, "object": "model", "created": crate::clock::unix_s(), "owned_by": "inferscope-sim",
        "root": s.cfg.model, "max_model_len": Scheduler::max_len(&s.cfg.engine),
    }]}))
    .into_response()
}

/// vLLM's `GET /version`: the sim answers with inferscope's (its `/v1/models` says it is the
/// sim).
async fn version() -> Response {
    Json(json!({"version": env!("CARGO_PKG_VERSION")})).into_response()
}

async fn metrics(State(s): St) -> Response {
    let text = s.metrics_text();
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

/// vLLM's `POST /reset_prefix_cache` (its dev-mode endpoint): the next requests find no cached
/// prefix.
async fn reset_prefix_cache(State(s): St) -> Response {
    match &s.engine {
        Some(engine) => {
            engine.reset_prefix_cache();
            StatusCode::OK.into_response()
        }
        None => ApiError::new(
            StatusCode::NOT_FOUND,
            "the fixed profile has no prefix cache",
        )
        .into_response(),
    }
}

async fn embeddings(State(s): St, body: Bytes) -> Response {
    let r: EmbeddingRequest = match openai::parse(&body) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    if let Err(e) = check_model(&s, &r.model) {
        return e.into_response();
    }
    let base64 = match r.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(_) => {
            return ApiError::bad_request(
                "encoding_format must be float or base64",
                Some("encoding_format"),
            )
            .into_response();
        }
    };
    let inputs: Vec<Vec<u32>> = match &r.input {
        EmbeddingInput::Text(t) => vec![tokenizer::encode(t)],
        EmbeddingInput::Texts(t) => t.iter().map(|x| tokenizer::encode(x)).collect(),
        EmbeddingInput::Tokens(t) => vec![t.clone()],
    };
    let dim = s.cfg.vector.dim;
    let tokens: usize = inputs.iter().map(Vec::len).sum();
    let data: Vec<_> = inputs
        .iter()
        .enumerate()
        .map(|(i, toks)| {
            let v = vector::embed_tokens(toks, dim);
            let emb = if base64 {
                json!(format::base64(
                    &v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>()
                ))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": i, "embedding": emb})
        })
        .collect();
    s.counters
        .embedding_requests
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Json(json!({"object": "list", "data": data, "model": r.model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}))
    .into_response()
}

#[derive(Deserialize)]
struct VectorQuery {
    vector: Option<Vec<f32>>,
    text: Option<String>,
    #[serde(default = "ten")]
    top_k: usize,
    ef_search: Option<usize>,
}

fn ten() -> usize {
    10
}

async fn vector_query(s: Arc<AppState>, body: Bytes, exact: bool) -> Response {
    let t0 = std::time::Instant::now();
    let q: VectorQuery = match openai::parse(&body) {
        Ok(q) => q,
        Err(e) => return e.into_response(),
    };
    let v = match s.vector.query(q.vector, q.text.as_deref()) {
        Ok(v) => v,
        Err(e) => return ApiError::bad_request(e.to_string(), None).into_response(),
    };
    let delay = s.vector.delay() + s.faults.delay(t0);
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    if s.faults.inject_error() {
        return ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "injected fault").into_response();
    }
    let svc = s.vector.clone();
    let res = tokio::task::spawn_blocking(move || {
        if exact {
            svc.exact(&v, q.top_k)
        } else {
            svc.search(&v, q.top_k, q.ef_search)
        }
    })
    .await;
    match res {
        Ok(Ok(hits)) => Json(json!({"results": hits, "exact": exact,
            "took_ms": t0.elapsed().as_secs_f64() * 1e3}))
        .into_response(),
        Ok(Err(e)) => ApiError::bad_request(e.to_string(), Some("top_k")).into_response(),
        Err(_) => {
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "search task failed").into_response()
        }
    }
}

async fn vector_search(State(s): St, body: Bytes) -> Response {
    vector_query(s, body, false).await
}

async fn vector_exact(State(s): St, body: Bytes) -> Response {
    vector_query(s, body, true).await
}

async fn vector_rebuild(State(s): St) -> Response {
    if s.vector.start_rebuild() {
        (StatusCode::ACCEPTED, Json(json!({"status": "rebuilding"}))).into_response()
    } else {
        ApiError::new(StatusCode::CONFLICT, "a rebuild is already running").into_response()
    }
}

async fn vector_status(State(s): St) -> Response {
    Json(json!({
        "rebuilding": s.vector.rebuilding(),
        "rebuilds": s.vector.rebuilds(),
        "corpus_size": s.cfg.vector.corpus_size,
        "dim": s.vector.dim(),
    }))
    .into_response()
}

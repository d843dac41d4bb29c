//! The retrieval services of a RAG pipeline: embeddings (`POST /v1/embeddings`, the shape of
//! `OpenAI`'s API) and re-ranking (`POST /v1/rerank`, the shape vLLM, TEI, Jina and Cohere serve), each
//! one JSON exchange read into a record; and a tool call (its arguments posted, the answer's
//! text back).

use std::time::Instant;

use bytes::Bytes;
use http_body_util::Full;
use hyper::Request;
use serde_json::{Value, json};

use crate::loadgen::client::{
    fail_status, read_body, us_since,
    via::{Via, send},
};
use crate::loadgen::scenario::json_path::{AnswerPaths, JsonPath};
use crate::measure::record::{ErrorClass, RequestRecord};

/// Longest tool result kept for the conversation, bytes.
pub const MAX_TOOL_RESULT: usize = 16 << 10;

/// The body of an embeddings request for `input`.
#[must_use]
pub fn embed_body(model: &str, input: &str) -> Bytes {
    Bytes::from(json!({"model": model, "input": input}).to_string())
}

/// The body of a re-rank request.
#[must_use]
pub fn rerank_body(model: &str, query: &str, documents: &[String], top_n: Option<u32>) -> Bytes {
    let mut body = json!({"model": model, "query": query, "documents": documents});
    if let Some(n) = top_n {
        body["top_n"] = json!(n);
    }
    Bytes::from(body.to_string())
}

/// Sends `req` and reads the whole answer of a 2xx into JSON; a failure is in `rec`.
async fn exchange(
    via: &mut Via<'_>,
    req: Request<Full<Bytes>>,
    rec: &mut RequestRecord,
    t0: Instant,
) -> Option<Bytes> {
    let resp = send(via, req, rec, t0).await.ok()?;
    let status = resp.status();
    let body = read_body(resp, rec, t0).await?;
    rec.end_us = us_since(t0);
    if !status.is_success() {
        fail_status(rec, status.as_u16(), &body);
        return None;
    }
    Some(body)
}

fn json_of(body: &[u8], what: &str, rec: &mut RequestRecord) -> Option<Value> {
    match serde_json::from_slice(body) {
        Ok(v) => Some(v),
        Err(e) => {
            rec.fail(
                ErrorClass::MalformedStream,
                format!("{what} answer is not JSON: {e}"),
            );
            None
        }
    }
}

/// An embeddings request: `data[0].embedding`, or `None` with the failure in `rec`.
pub async fn embed(
    via: &mut Via<'_>,
    req: Request<Full<Bytes>>,
    rec: &mut RequestRecord,
    t0: Instant,
) -> Option<Vec<f32>> {
    let body = exchange(via, req, rec, t0).await?;
    let v = json_of(&body, "embeddings", rec)?;
    let vector: Option<Vec<f32>> = v
        .pointer("/data/0/embedding")
        .and_then(Value::as_array)
        .and_then(|a| a.iter().map(|x| x.as_f64().map(|f| f as f32)).collect());
    match vector {
        Some(vec) if !vec.is_empty() => Some(vec),
        _ => {
            rec.fail(
                ErrorClass::MalformedStream,
                "embeddings answer has no `data[0].embedding` list of numbers",
            );
            None
        }
    }
}

/// A vector search: each hit's id, best first, with its text when `texts` says where the
/// answer holds it; or `None` with the failure in `rec`.
pub async fn search(
    via: &mut Via<'_>,
    req: Request<Full<Bytes>>,
    paths: &AnswerPaths,
    texts: Option<&JsonPath>,
    rec: &mut RequestRecord,
    t0: Instant,
) -> Option<Vec<(String, Option<String>)>> {
    let body = exchange(via, req, rec, t0).await?;
    let ids = match paths.ids(&body) {
        Ok(ids) => ids,
        Err(e) => {
            rec.fail(ErrorClass::MalformedStream, format!("search answer: {e}"));
            return None;
        }
    };
    let Some(path) = texts else {
        return Some(ids.into_iter().map(|id| (id, None)).collect());
    };
    let v = json_of(&body, "search", rec)?;
    let found: Vec<Option<String>> = match path.eval(&v) {
        Ok(found) => found
            .into_iter()
            .map(|t| t.as_str().map(str::to_owned))
            .collect(),
        Err(e) => {
            rec.fail(
                ErrorClass::MalformedStream,
                format!("texts path `{}` matched nothing: {e}", path.as_str()),
            );
            return None;
        }
    };
    Some(
        ids.into_iter()
            .enumerate()
            .map(|(i, id)| (id, found.get(i).cloned().flatten()))
            .collect(),
    )
}

/// A re-rank request: the documents' indices, best first (`results[].index`), or `None` with
/// the failure in `rec`.
pub async fn rerank(
    via: &mut Via<'_>,
    req: Request<Full<Bytes>>,
    documents: usize,
    rec: &mut RequestRecord,
    t0: Instant,
) -> Option<Vec<usize>> {
    let body = exchange(via, req, rec, t0).await?;
    let v = json_of(&body, "rerank", rec)?;
    let order: Option<Vec<usize>> = v.get("results").and_then(Value::as_array).and_then(|a| {
        a.iter()
            .map(|r| {
                r.get("index")
                    .and_then(Value::as_u64)
                    .map(|i| i as usize)
                    .filter(|i| *i < documents)
            })
            .collect()
    });
    if order.is_none() {
        rec.fail(
            ErrorClass::MalformedStream,
            format!("rerank answer has no `results[].index` within the {documents} documents sent"),
        );
    }
    order
}

/// A tool call: the answer's text (at most [`MAX_TOOL_RESULT`] bytes), or `None` with the
/// failure in `rec`.
pub async fn tool(
    via: &mut Via<'_>,
    req: Request<Full<Bytes>>,
    rec: &mut RequestRecord,
    t0: Instant,
) -> Option<String> {
    let body = exchange(via, req, rec, t0).await?;
    let end = body.len().min(MAX_TOOL_RESULT);
    // A cut inside a character loses that character only.
    Some(
        String::from_utf8_lossy(&body[..end])
            .trim_end_matches('\u{fffd}')
            .to_owned(),
    )
}

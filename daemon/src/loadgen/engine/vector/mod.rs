//! Vector search against the sim and real vector databases.
//!
//! A phase's `request.api` picks how a query is written and its answer read: `sim` (the
//! embedded server's `/v1/vector/search`), `chroma` (Chroma's v2 HTTP API), `qdrant`
//! (Qdrant's REST `points/search`) or `json` (any HTTP API, from a body template and JSON
//! paths; `json.rs`). Each query is timed like any request. recall@k comes from one of two
//! ground truths: the corpus the client inserted (`request.corpus`, searched exactly on the
//! client by `truth.rs`, off the request path), or, without one, a server's exact endpoint
//! (`exact_path`, the sim's `/v1/vector/exact`) asked after the timed query.

pub mod api;
pub mod corpus;
pub mod errors;
pub mod setup;
pub mod truth;

use std::{sync::Arc, time::Instant};

use bytes::Bytes;
use hyper::Method;
use rand::Rng;
use rand_distr::{Distribution, StandardNormal};

pub use api::{ApiKind, JsonApiSpec, VectorPhase};

use crate::loadgen::client::{
    Target, fail_status, read_body, us_since,
    via::{Via, send},
};
use crate::measure::record::{ErrorClass, RequestRecord};

/// A random unit vector (uniform direction) of `dims` dimensions.
pub fn random_unit_vector<R: Rng>(dims: usize, rng: &mut R) -> Vec<f32> {
    let v: Vec<f32> = (0..dims).map(|_| StandardNormal.sample(rng)).collect();
    let norm = v
        .iter()
        .map(|x| x * x)
        .sum::<f32>()
        .sqrt()
        .max(f32::MIN_POSITIVE);
    v.into_iter().map(|x| x / norm).collect()
}

/// The ids of the sim's `{"results":[{"id":..,"distance":..}]}`, as strings.
pub fn result_ids(body: &[u8]) -> Result<Vec<String>, String> {
    ApiKind::Sim.paths().ids(body)
}

/// recall@k: the share of the exact top-k found by the approximate search.
#[must_use]
pub fn recall_at_k(found: &[String], exact: &[String], k: usize) -> f64 {
    let truth: Vec<&String> = exact.iter().take(k).collect();
    if truth.is_empty() {
        return 1.0;
    }
    let hits = found.iter().take(k).filter(|id| truth.contains(id)).count();
    hits as f64 / truth.len() as f64
}

/// What one vector request needs besides the body.
pub struct VectorCall<'a> {
    /// The phase's vector settings.
    pub phase: &'a VectorPhase,
    /// The query vector, when this query is sampled against the client's corpus.
    pub query: Option<Arc<Vec<f32>>>,
    /// Whether this query is sampled for recall.
    pub sampled: bool,
    /// Extra headers of the phase.
    pub headers: &'a [(hyper::header::HeaderName, hyper::header::HeaderValue)],
}

/// Runs one search into `rec`. A sampled query against the client's corpus comes back as
/// the ground-truth work still to do; against an exact endpoint, its recall is set here,
/// after the timed exchange.
pub async fn call(
    via: &mut Via<'_>,
    target: &Target,
    body: Bytes,
    call: VectorCall<'_>,
    rec: &mut RequestRecord,
    t0: Instant,
) -> Option<truth::Pending> {
    let phase = call.phase;
    let uri = phase.search_uri();
    let req = target.request_to(&phase.method, uri, body.clone(), call.headers);
    let resp = send(via, req, rec, t0).await.ok()?;
    let status = resp.status();
    let answer = read_body(resp, rec, t0).await?;
    rec.end_us = us_since(t0);
    if !status.is_success() {
        fail_status(rec, status.as_u16(), &answer);
        return None;
    }
    let found = match phase.paths.ids(&answer) {
        Ok(ids) => ids,
        Err(e) => {
            rec.fail(
                ErrorClass::MalformedStream,
                format!("{}: {e}", phase.api.name()),
            );
            return None;
        }
    };
    if !call.sampled {
        return None;
    }
    if let (Some(corpus), Some(query)) = (&phase.corpus, call.query) {
        return Some(truth::Pending {
            corpus: corpus.clone(),
            query,
            found,
            k: phase.top_k,
        });
    }
    let exact = phase.exact_uri.as_ref()?;
    let req = target.request_to(&Method::POST, exact.clone(), body, call.headers);
    // The ground truth is a separate measurement: a failure there leaves recall unknown
    // but does not fail the timed search.
    if let Ok(crate::loadgen::client::via::Sent { resp, .. }) = via.request(req).await
        && resp.status().is_success()
        && let Ok(b) = http_body_util::BodyExt::collect(resp.into_body()).await
        && let Ok(exact) = phase.paths.ids(&b.to_bytes())
    {
        rec.recall = Some(recall_at_k(&found, &exact, phase.top_k));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{SeedableRng, rngs::SmallRng};

    #[test]
    fn ids_and_recall() {
        let found = result_ids(
            br#"{"results":[{"id":1,"distance":0.1},{"id":"b","distance":0.2},{"id":3,"distance":0.3}]}"#,
        )
        .unwrap();
        assert_eq!(found, ["1", "b", "3"]);
        let exact: Vec<String> = ["1", "3", "9"].iter().map(|s| (*s).to_string()).collect();
        assert!((recall_at_k(&found, &exact, 3) - 2.0 / 3.0).abs() < 1e-9);
        assert!((recall_at_k(&found, &exact, 1) - 1.0).abs() < 1e-9);
        assert!(result_ids(b"{}").is_err());
    }

    #[test]
    fn unit_vectors() {
        let mut rng = SmallRng::seed_from_u64(1);
        let v = random_unit_vector(64, &mut rng);
        let n: f32 = v.iter().map(|x| x * x).sum();
        assert!((n - 1.0).abs() < 1e-4);
    }
}

//! Vector search: `POST /v1/vector/search` timed like any request, and on a sample of
//! queries the same body sent to the exact endpoint afterwards, so each sampled request
//! carries its latency and its recall@k together (the seed's P999 + recall joint probe).
//! The ground-truth call is made after the timed one and is not part of any latency.

use std::time::Instant;

use bytes::Bytes;
use hyper::Method;
use rand::Rng;
use rand_distr::{Distribution, StandardNormal};
use serde_json::Value;

use super::{
    client::{Target, Via, fail_status, read_body, send, us_since},
    record::{ErrorClass, RequestRecord},
};

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

/// The ids of `{"results":[{"id":..,"distance":..}]}`, as strings (ids may be numbers).
pub fn result_ids(body: &[u8]) -> Result<Vec<String>, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("answer is not JSON: {e}"))?;
    let results = v
        .get("results")
        .and_then(Value::as_array)
        .ok_or("answer has no `results` array")?;
    Ok(results
        .iter()
        .filter_map(|r| r.get("id"))
        .map(|id| id.as_str().map_or_else(|| id.to_string(), str::to_string))
        .collect())
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

/// What the vector request needs besides the body.
pub struct VectorCall<'a> {
    /// Search URI.
    pub uri: &'a hyper::Uri,
    /// Ground-truth URI, when this query is sampled for recall.
    pub exact: Option<&'a hyper::Uri>,
    /// `top_k` of the query.
    pub top_k: usize,
    /// Extra headers of the phase.
    pub headers: &'a [(hyper::header::HeaderName, hyper::header::HeaderValue)],
}

/// Runs one search (and, when sampled, its ground-truth query) into `rec`.
pub async fn call(
    via: &mut Via<'_>,
    target: &Target,
    body: Bytes,
    call: VectorCall<'_>,
    rec: &mut RequestRecord,
    t0: Instant,
) {
    let req = target.request_to(&Method::POST, call.uri.clone(), body.clone(), call.headers);
    let Ok(resp) = send(via, req, rec, t0).await else {
        return;
    };
    let status = resp.status();
    let Some(answer) = read_body(resp, rec, t0).await else {
        return;
    };
    rec.end_us = us_since(t0);
    if !status.is_success() {
        fail_status(rec, status.as_u16(), &answer);
        return;
    }
    let found = match result_ids(&answer) {
        Ok(ids) => ids,
        Err(e) => return rec.fail(ErrorClass::MalformedStream, e),
    };
    let Some(exact) = call.exact else {
        return;
    };
    let req = target.request_to(&Method::POST, exact.clone(), body, call.headers);
    // The ground truth is a separate measurement: a failure there leaves recall unknown
    // but does not fail the timed search.
    if let Ok((resp, _)) = via.request(req).await
        && resp.status().is_success()
        && let Ok(b) = http_body_util::BodyExt::collect(resp.into_body()).await
        && let Ok(exact) = result_ids(&b.to_bytes())
    {
        rec.recall = Some(recall_at_k(&found, &exact, call.top_k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{SeedableRng, rngs::SmallRng};

    #[test]
    fn ids_and_recall() {
        let found = result_ids(
            br#"{"results":[{"id":1,"distance":0.1},{"id":"b","distance":0.2},{"id":3}]}"#,
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

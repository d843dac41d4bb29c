//! Before a run: each vector phase's collection is created and seeded with its corpus (once
//! per collection and corpus), its dimension settled (given, the corpus's, or asked of the
//! server, and a mismatch refused), Chroma's collection id looked up, and one test query sent
//! so that a template or path that does not fit the server stops the run with one line
//! instead of failing every request. None of this is timed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::{
    Method,
    header::{HeaderName, HeaderValue},
};
use serde_json::{Value, json};

use crate::loadgen::client::{HttpClient, Target, error_chain};
use crate::loadgen::engine::vector::{
    api::{
        ApiKind, VectorPhase, chroma_add_body, chroma_collections, chroma_space, qdrant_distance,
        qdrant_points_body,
    },
    corpus::Corpus,
    errors::{ExchangeError, Failure, Seeding, SetupError},
};
use crate::loadgen::scenario::body::Vars;

/// How long one setup request may take (a large insert batch included).
const SETUP_TIMEOUT: Duration = Duration::from_mins(2);

/// State shared by the phases of one run's setup.
#[derive(Default)]
pub struct Setup {
    corpora: BTreeMap<(u64, usize, usize), Arc<Corpus>>,
    seeded: BTreeSet<String>,
}

/// The HTTP side of setup.
pub struct Http<'a> {
    /// The run's client (through the loopback guardrail).
    pub client: &'a HttpClient,
    /// The target.
    pub target: &'a Target,
    /// Headers of the phase.
    pub headers: &'a [(HeaderName, HeaderValue)],
}

impl Http<'_> {
    /// One exchange: status and body, or why there was none.
    pub async fn exchange(
        &self,
        method: Method,
        path: &str,
        body: Option<String>,
    ) -> Result<(u16, Bytes), ExchangeError> {
        let uri = self.target.uri(path)?;
        self.exchange_uri(method, uri, body.map(Bytes::from).unwrap_or_default())
            .await
    }

    async fn exchange_uri(
        &self,
        method: Method,
        uri: hyper::Uri,
        body: Bytes,
    ) -> Result<(u16, Bytes), ExchangeError> {
        let what = format!("{method} {}", uri.path());
        let no_answer = |why: String| ExchangeError::NoAnswer {
            what: what.clone(),
            why,
        };
        let req = self.target.request_to(&method, uri, body, self.headers);
        let fut = async {
            let resp = self
                .client
                .request(req)
                .await
                .map_err(|e| no_answer(error_chain(&e)))?;
            let status = resp.status().as_u16();
            let b = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| no_answer(format!("reading the answer: {e}")))?
                .to_bytes();
            Ok((status, b))
        };
        tokio::time::timeout(SETUP_TIMEOUT, fut)
            .await
            .map_err(|_| no_answer(format!("no answer within {}s", SETUP_TIMEOUT.as_secs())))?
    }

    /// An exchange that must answer 2xx; the answer as JSON.
    async fn ok(
        &self,
        method: Method,
        path: &str,
        body: Option<String>,
    ) -> Result<Value, ExchangeError> {
        let what = format!("{method} {path}");
        let (status, b) = self.exchange(method, path, body).await?;
        if !(200..300).contains(&status) {
            return Err(ExchangeError::Status {
                what,
                status,
                body: short(&b),
            });
        }
        Ok(serde_json::from_slice(&b).unwrap_or(Value::Null))
    }
}

fn short(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(&b[..b.len().min(200)]);
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl Setup {
    /// Completes phase `v`: corpus, seeding, dimension, Chroma's collection id.
    pub async fn phase(
        &mut self,
        v: &mut VectorPhase,
        http: &Http<'_>,
        scenario_seed: Option<u64>,
        text_queries: bool,
    ) -> Result<(), SetupError> {
        let name = v.phase.clone();
        let fail = |failure: Failure| SetupError {
            phase: name.clone(),
            failure,
        };
        if let Some(spec) = v.corpus_spec.clone() {
            let seed = spec.seed.or(scenario_seed).unwrap_or(0);
            if let Some(d) = v.dims
                && d != spec.dimensions
            {
                return Err(fail(Failure::CorpusDimensions {
                    given: d,
                    corpus: spec.dimensions,
                }));
            }
            v.dims = Some(spec.dimensions);
            let key = (seed, spec.vectors, spec.dimensions);
            let corpus = if let Some(c) = self.corpora.get(&key) {
                c.clone()
            } else {
                let (n, d) = (spec.vectors, spec.dimensions);
                let c = tokio::task::spawn_blocking(move || Corpus::generate(n, d, seed))
                    .await
                    .map(Arc::new)
                    .map_err(|e| fail(Failure::Corpus(e.to_string())))?;
                self.corpora.insert(key, c.clone());
                c
            };
            let dest = match (v.api, &v.json) {
                (ApiKind::Json, Some(j)) => j.insert.as_ref().map(|i| i.path.clone()),
                _ => Some(v.collection.clone()),
            };
            let once = format!(
                "{}|{dest:?}|{seed}|{}|{}",
                v.api.name(),
                spec.vectors,
                spec.dimensions
            );
            if spec.insert && dest.is_some() && self.seeded.insert(once) {
                seed_corpus(v, &corpus, spec.batch.unwrap_or(256), spec.metric, http)
                    .await
                    .map_err(|e| fail(Failure::Seeding(e)))?;
            }
            v.corpus = Some(corpus);
        }
        let server = server_dims(v, http).await.map_err(fail)?;
        match (v.dims, server) {
            (Some(want), Some((have, at))) if want != have => {
                return Err(fail(Failure::Dimensions { want, have, at }));
            }
            (None, Some((have, _))) => v.dims = Some(have),
            (None, None) if !text_queries => {
                return Err(fail(Failure::UnknownDimensions { api: v.api.name() }));
            }
            _ => {}
        }
        Ok(())
    }
}

/// Creates the collection (dropping one of that name first) and inserts the corpus.
async fn seed_corpus(
    v: &VectorPhase,
    corpus: &Corpus,
    batch: usize,
    metric: crate::loadgen::engine::vector::corpus::Metric,
    http: &Http<'_>,
) -> Result<(), Seeding> {
    let dims = corpus.dims;
    let c = &v.collection;
    match v.api {
        ApiKind::Chroma => {
            let coll = chroma_collections();
            // Absent is fine: the first run on a fresh server.
            http.exchange(Method::DELETE, &format!("{coll}/{c}"), None)
                .await?;
            let created = http
                .ok(
                    Method::POST,
                    &coll,
                    Some(
                        json!({"name": c, "metadata": {"hnsw:space": chroma_space(metric)}})
                            .to_string(),
                    ),
                )
                .await?;
            let id = created["id"].as_str().ok_or(Seeding::NoId)?;
            for (i, rows) in corpus.data.chunks(batch * dims).enumerate() {
                let body = chroma_add_body(i * batch, rows, dims);
                http.ok(Method::POST, &format!("{coll}/{id}/add"), Some(body))
                    .await?;
            }
        }
        ApiKind::Qdrant => {
            http.exchange(Method::DELETE, &format!("/collections/{c}"), None)
                .await?;
            let body = json!({"vectors": {"size": dims, "distance": qdrant_distance(metric)}});
            http.ok(
                Method::PUT,
                &format!("/collections/{c}"),
                Some(body.to_string()),
            )
            .await?;
            for (i, rows) in corpus.data.chunks(batch * dims).enumerate() {
                let body = qdrant_points_body(i * batch, rows, dims);
                http.ok(
                    Method::PUT,
                    &format!("/collections/{c}/points?wait=true"),
                    Some(body),
                )
                .await?;
            }
        }
        ApiKind::Json => {
            let Some(ins) = v.json.as_ref().and_then(|j| j.insert.as_ref()) else {
                return Ok(());
            };
            let method = ins.method.as_deref().unwrap_or("POST").to_ascii_uppercase();
            let method = Method::from_bytes(method.as_bytes())
                .map_err(|_| Seeding::Method(method.clone()))?;
            for (i, rows) in corpus.data.chunks(batch * dims).enumerate() {
                let body = ins.body.0.render(&Vars {
                    first_id: i * batch,
                    vectors: Some(rows),
                    dims,
                    ..Vars::default()
                });
                http.ok(method.clone(), &ins.path, Some(body)).await?;
            }
        }
        ApiKind::Sim => {
            return Err(Seeding::Sim);
        }
    }
    Ok(())
}

/// The index's dimension as the server says it (and where), when its API says it; sets
/// Chroma's search URI on the way.
async fn server_dims(
    v: &mut VectorPhase,
    http: &Http<'_>,
) -> Result<Option<(usize, String)>, Failure> {
    let c = v.collection.clone();
    match v.api {
        ApiKind::Sim => {
            // A server without the sim's status route (a look-alike) says nothing.
            let Ok((200, b)) = http.exchange(Method::GET, "/v1/vector/status", None).await else {
                return Ok(None);
            };
            let v: Value = serde_json::from_slice(&b).unwrap_or(Value::Null);
            Ok(v["dim"]
                .as_u64()
                .map(|d| (d as usize, "the sim's index".to_string())))
        }
        ApiKind::Chroma => {
            let coll = chroma_collections();
            let (status, b) = http
                .exchange(Method::GET, &format!("{coll}/{c}"), None)
                .await?;
            if status == 404 || (status == 400 && short(&b).contains("does not exist")) {
                return Err(Failure::NoCollection {
                    api: "Chroma",
                    collection: c,
                });
            }
            let what = format!("GET {coll}/{c}");
            if !(200..300).contains(&status) {
                let body = short(&b);
                return Err(ExchangeError::Status { what, status, body }.into());
            }
            let info: Value = serde_json::from_slice(&b).map_err(|_| Failure::CollectionInfo {
                what: what.clone(),
                why: format!("the answer is not JSON: {}", short(&b)),
            })?;
            let id = info["id"].as_str().ok_or_else(|| Failure::CollectionInfo {
                what,
                why: "the answer has no collection `id`".into(),
            })?;
            let uri = |path: String| http.target.uri(&path).map_err(ExchangeError::from);
            v.search = uri(format!("{coll}/{id}/query"))?;
            let by_id = uri(format!("{coll}/{id}"))?;
            // Checked here, so that a server refusing it stops the run before it starts.
            if let Some(ef) = v.ef_search {
                chroma_set_ef(http, by_id.clone(), ef).await?;
            }
            v.collection_uri = Some(by_id);
            Ok(info["dimension"]
                .as_u64()
                .map(|d| (d as usize, format!("Chroma collection `{c}`"))))
        }
        ApiKind::Qdrant => {
            let (status, b) = http
                .exchange(Method::GET, &format!("/collections/{c}"), None)
                .await?;
            if status == 404 {
                return Err(Failure::NoCollection {
                    api: "Qdrant",
                    collection: c,
                });
            }
            let info: Value = serde_json::from_slice(&b).unwrap_or(Value::Null);
            Ok(info
                .pointer("/result/config/params/vectors/size")
                .and_then(Value::as_u64)
                .map(|d| (d as usize, format!("Qdrant collection `{c}`"))))
        }
        ApiKind::Json => Ok(None),
    }
}

/// Sets a Chroma collection's `ef_search` (`PUT .../collections/{id}`).
pub async fn chroma_set_ef(http: &Http<'_>, uri: hyper::Uri, ef: u32) -> Result<(), Failure> {
    let body = json!({"new_configuration": {"hnsw": {"ef_search": ef}}}).to_string();
    let (status, b) = http
        .exchange_uri(Method::PUT, uri, Bytes::from(body))
        .await?;
    if (200..300).contains(&status) {
        Ok(())
    } else {
        Err(Failure::EfSearch {
            ef,
            status,
            body: short(&b),
        })
    }
}

/// Sends one query (not recorded) and checks that its answer reads: a 4xx or an answer the
/// adapter cannot read stops the run. A 5xx does not (it may be a fault under test).
pub async fn preflight(v: &VectorPhase, http: &Http<'_>, body: Bytes) -> Result<(), SetupError> {
    let fail = |failure: Failure| SetupError {
        phase: v.phase.clone(),
        failure,
    };
    let (status, b) = http
        .exchange_uri(v.method.clone(), v.search_uri(), body)
        .await
        .map_err(|e| fail(Failure::TestQuery(e)))?;
    let json = v.api == ApiKind::Json;
    if (400..500).contains(&status) {
        let body = short(&b);
        return Err(fail(Failure::Refused { status, body, json }));
    }
    if (200..300).contains(&status) {
        v.paths.ids(&b).map_err(|e| {
            fail(Failure::Unreadable {
                api: v.api.name(),
                why: e,
                json,
            })
        })?;
    }
    Ok(())
}

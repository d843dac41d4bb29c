//! Turning a phase's request spec into concrete requests, and executing one.

use std::{sync::Arc, time::Instant};

use bytes::Bytes;
use hyper::{
    Method,
    header::{HeaderName, HeaderValue},
};
use rand::{Rng, rngs::SmallRng};
use serde_json::{Map, Value, json};

use crate::loadgen::{
    client::openai,
    client::{
        Target, TargetError,
        via::{Via, plain},
    },
    engine::conversation::{Conversation, TurnRequest, system_prompt},
    engine::pipeline::{self, Pipeline, TaskInput},
    engine::vector::{self, ApiKind, VectorCall, VectorPhase, truth::Pending},
    scenario::dataset::{Dataset, Row, Turn},
    scenario::plan::Plan,
    scenario::replay::Replay,
    scenario::template::{Ctx, JsonTemplate, Template},
    scenario::{ChaosSpec, Phase, RequestSpec},
};

use crate::measure::{
    record::{Chaos, Endpoint, RequestRecord},
    slo::Slo,
};

/// Ground truth of a sim vector search when `exact_path` is not given.
const DEFAULT_EXACT_PATH: &str = "/v1/vector/exact";
/// Collection of the Chroma and Qdrant adapters when `collection` is not given.
const DEFAULT_COLLECTION: &str = "inferscope";

const DEFAULT_PROMPT: &str = "Explain in a few sentences why the sky is blue.";

/// Everything needed to build and judge the requests of one phase.
#[derive(Debug)]
pub struct PhaseCtx {
    /// Index in the scenario.
    pub index: u32,
    /// Endpoint kind.
    pub endpoint: Endpoint,
    uri: hyper::Uri,
    method: Method,
    /// Vector search: the API, collection, corpus (completed by `vector::setup`).
    pub vector: Option<VectorPhase>,
    spec: RequestSpec,
    prompt: Option<Template>,
    dataset: Option<Arc<Dataset>>,
    chaos: ChaosSpec,
    /// The phase's SLOs (per-request ones decide goodput).
    pub slos: Vec<Slo>,
    headers: Vec<(HeaderName, HeaderValue)>,
    /// The shared system prompt of the phase's conversations.
    system: Option<String>,
    /// What an answer must be for its task to succeed.
    check: Option<Arc<crate::loadgen::scenario::check::Check>>,
    /// A pipeline phase's steps (`request.pipeline`): each arrival runs them as one task.
    pub pipeline: Option<Pipeline>,
    /// A Mooncake trace's rows (`load: {shape: trace, format: mooncake}`): arrival i sends
    /// row i.
    replay: Option<Arc<Replay>>,
    /// A session phase's plan (`request.session`): each arrival runs an agentic session.
    pub session: Option<Arc<crate::loadgen::engine::session::plan::SessionPlan>>,
}

/// One request ready to go.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The JSON (or raw) body.
    pub body: Bytes,
    /// Chaos knob applied.
    pub chaos: Option<Chaos>,
    /// Output tokens this request asks for (`max_tokens`), for the tokens/s cap.
    pub max_tokens: Option<u32>,
    /// Whether the answer is streamed.
    pub stream: bool,
    /// Vector: whether this query is sampled for recall.
    pub sample_recall: bool,
    /// The 1-based turn of a conversation this request is.
    pub turn: Option<u32>,
    /// Keep the answer's text (a conversation's history needs it).
    pub keep_text: bool,
    /// Vector: the query, kept for the client's exact search when sampled.
    pub query: Option<Arc<Vec<f32>>>,
    /// A pipeline task's query and chat prompt.
    pub task: Option<Box<TaskInput>>,
}

/// What executing a request leaves besides its record.
#[derive(Debug, Default)]
pub struct Executed {
    /// The answer's text (when kept and the request succeeded).
    pub text: Option<String>,
    /// A sampled vector query's ground truth, still to compute.
    pub truth: Option<Pending>,
}

impl PhaseCtx {
    /// Compiles phase `index` of `plan` (given as `phase`, with the model discovery chose).
    pub fn new(
        index: u32,
        phase: &Phase,
        plan: &Plan,
        target: &Target,
    ) -> Result<Self, TargetError> {
        let spec = phase.request.clone();
        let endpoint = spec.endpoint.unwrap_or(Endpoint::Chat);
        let api = spec.api.unwrap_or_default();
        let collection = spec
            .collection
            .clone()
            .unwrap_or_else(|| DEFAULT_COLLECTION.to_string());
        let path = spec.path.clone().unwrap_or_else(|| match api {
            ApiKind::Qdrant if endpoint == Endpoint::VectorSearch => {
                format!("/collections/{collection}/points/search")
            }
            // Chroma's path holds the collection's id: setup sets it.
            ApiKind::Chroma if endpoint == Endpoint::VectorSearch => {
                vector::api::chroma_collections()
            }
            _ => endpoint.default_path().to_string(),
        });
        let method = match &spec.method {
            Some(m) => Method::from_bytes(m.to_ascii_uppercase().as_bytes())
                .map_err(|_| TargetError::Header(m.clone()))?,
            None if endpoint == Endpoint::Http && spec.body.is_none() => Method::GET,
            None => Method::POST,
        };
        let headers = request_headers(&spec)?;
        let dataset = spec
            .dataset
            .as_ref()
            .and_then(|d| plan.datasets().get(d).cloned());
        let uri = target.uri(&path)?;
        let pipeline = compile_pipeline(&spec, &phase.name, target)?;
        let session = crate::loadgen::engine::session::plan::SessionPlan::new(
            &spec,
            dataset.clone(),
            target,
        )?
        .map(Arc::new);
        let vector = if endpoint == Endpoint::VectorSearch {
            let exact = match (api, &spec.exact_path) {
                (_, Some(p)) => Some(p.as_str()),
                (ApiKind::Sim, None) => Some(DEFAULT_EXACT_PATH),
                _ => None,
            };
            let qdrant_query = api == ApiKind::Qdrant && path.ends_with("/points/query");
            Some(VectorPhase {
                qdrant_query,
                phase: phase.name.clone(),
                api,
                method: method.clone(),
                search: uri.clone(),
                collection_uri: None,
                exact_uri: exact.map(|p| target.uri(p)).transpose()?,
                paths: spec.json.as_ref().map_or_else(
                    || {
                        if qdrant_query {
                            vector::api::qdrant_query_paths()
                        } else {
                            api.paths()
                        }
                    },
                    |j| crate::loadgen::scenario::body::AnswerPaths {
                        ids: j.ids.clone(),
                        scores: j.scores.clone(),
                    },
                ),
                json: spec.json.clone(),
                collection,
                dims: spec.dimensions,
                top_k: spec.top_k.unwrap_or(10) as usize,
                ef_search: spec.ef_search,
                corpus_spec: spec.corpus.clone(),
                corpus: None,
                recall_sample: spec.recall_sample.unwrap_or(0.0),
            })
        } else {
            None
        };
        Ok(PhaseCtx {
            index,
            endpoint,
            uri,
            vector,
            method,
            prompt: spec.prompt.clone(),
            dataset,
            chaos: phase.chaos.clone(),
            slos: phase.slo.clone(),
            headers,
            check: plan.check(index as usize),
            pipeline,
            session,
            replay: phase.load.replay(),
            system: phase
                .request
                .conversation
                .as_ref()
                .and_then(|c| c.system_prompt_words)
                .map(system_prompt),
            spec,
        })
    }

    /// The phase's retry policy.
    #[must_use]
    pub fn retry(&self) -> Option<&crate::loadgen::scenario::retry::RetrySpec> {
        self.spec.retry.as_ref()
    }

    /// Whether this phase runs conversations, and their think time.
    #[must_use]
    pub fn think_time(&self) -> Option<std::time::Duration> {
        self.spec.conversation.as_ref().map(|c| c.think_time)
    }

    /// A new conversation: a recorded conversation's turns (`ShareGPT`), else `turns` prompts
    /// (dataset rows or template renders).
    pub fn start_conversation(&self, rng: &mut SmallRng, seq: u64) -> Option<Conversation> {
        let spec = self.spec.conversation.as_ref()?;
        let row = self.dataset.as_ref().map(|d| d.pick(rng));
        let turns = match row {
            Some(r) if !r.turns.is_empty() && self.prompt.is_none() => r.turns,
            first => {
                let mut turns = Vec::new();
                let mut row = first;
                for _ in 0..spec.turns {
                    let mut ctx = Ctx {
                        rng,
                        row: row.as_ref(),
                        seq,
                    };
                    let user = match (&self.prompt, &row) {
                        (Some(t), _) => t.render(&mut ctx),
                        (None, Some(r)) => r.prompt.clone(),
                        (None, None) => DEFAULT_PROMPT.to_string(),
                    };
                    turns.push(Turn { user, reply: None });
                    row = self.dataset.as_ref().map(|d| d.pick(rng));
                }
                turns
            }
        };
        Some(Conversation::new(spec, self.system.as_deref(), turns))
    }

    /// Renders the next turn of `conv`; `None` when it has no turn left.
    pub fn prepare_turn(
        &self,
        rng: &mut SmallRng,
        seq: u64,
        conv: &mut Conversation,
    ) -> Option<Prepared> {
        let turn = conv.next_turn()?;
        let mut ctx = Ctx {
            rng,
            row: None,
            seq,
        };
        let keep_text = conv.wants_model_text();
        let mut p = self.prepare_llm(&mut ctx, None, Some(turn));
        p.keep_text |= keep_text;
        Some(p)
    }

    /// Renders request `seq`, the phase's arrival number `arrival` when it is one (a
    /// replayed trace sends that arrival's row).
    pub fn prepare(&self, rng: &mut SmallRng, seq: u64, arrival: Option<usize>) -> Prepared {
        let row = match &self.replay {
            Some(r) => r.request(arrival.unwrap_or(seq as usize)),
            None => self.dataset.as_ref().map(|d| d.pick(rng)),
        };
        let mut ctx = Ctx {
            rng,
            row: row.as_ref(),
            seq,
        };
        if let Some(pipe) = &self.pipeline {
            let query = match (&self.prompt, &row) {
                (Some(t), _) => t.render(&mut ctx),
                (None, Some(r)) => r.prompt.clone(),
                (None, None) => DEFAULT_PROMPT.to_string(),
            };
            return Prepared {
                task: Some(Box::new(pipe.task(query, &mut ctx))),
                keep_text: true,
                stream: true,
                ..Prepared::empty()
            };
        }
        match self.endpoint {
            Endpoint::Chat | Endpoint::Completions => {
                self.prepare_llm(&mut ctx, row.as_ref(), None)
            }
            Endpoint::VectorSearch => {
                let Some(v) = &self.vector else {
                    return Prepared::empty();
                };
                let text = self.spec.text.as_ref().map(|t| t.render(&mut ctx));
                let query = match (&text, &v.corpus, v.dims) {
                    (None, Some(c), _) => Some(c.query(ctx.rng)),
                    (None, None, Some(d)) => Some(vector::random_unit_vector(d, ctx.rng)),
                    // Text: the server embeds it.
                    _ => None,
                };
                let extra = extra(self.spec.body.as_ref(), &mut ctx);
                let body = v.body(query.as_deref(), text.as_deref(), extra);
                let sample_recall = ctx.rng.random::<f64>() < v.recall_sample;
                Prepared {
                    body,
                    sample_recall,
                    query: (sample_recall && v.corpus.is_some())
                        .then(|| query.map(Arc::new))
                        .flatten(),
                    ..Prepared::empty()
                }
            }
            Endpoint::Http => {
                let body = match self.spec.body.as_ref().map(|t| t.render(&mut ctx)) {
                    Some(Value::String(s)) => Bytes::from(s),
                    Some(v) => Bytes::from(v.to_string()),
                    None => Bytes::new(),
                };
                Prepared {
                    body,
                    ..Prepared::empty()
                }
            }
        }
    }

    /// A chat or completions request: `turn` (a conversation's) gives the messages, else the
    /// prompt is the template, the row's, or the default.
    fn prepare_llm(
        &self,
        ctx: &mut Ctx<'_, SmallRng>,
        row: Option<&Row>,
        turn: Option<TurnRequest>,
    ) -> Prepared {
        let u: f64 = ctx.rng.random();
        let c = &self.chaos;
        let chaos = if u < c.max_tokens_one {
            Some(Chaos::MaxTokensOne)
        } else if u < c.max_tokens_one + c.abort_mid_stream {
            Some(Chaos::AbortMidStream)
        } else if u < c.max_tokens_one + c.abort_mid_stream + c.oversize_prompt {
            Some(Chaos::OversizePrompt)
        } else {
            None
        };
        let mut prompt = match (&self.prompt, &row) {
            (Some(t), _) => t.render(ctx),
            (None, Some(r)) => r.prompt.clone(),
            (None, None) => DEFAULT_PROMPT.to_string(),
        };
        if chaos == Some(Chaos::OversizePrompt) {
            let n = c.oversize_tokens.unwrap_or(200_000) as usize;
            prompt = "token ".repeat(n);
        }
        let max_tokens = if chaos == Some(Chaos::MaxTokensOne) {
            Some(1)
        } else {
            self.spec
                .max_tokens
                .or(row.as_ref().and_then(|r| r.output_tokens))
                .or(turn.as_ref().and_then(|t| t.reply_tokens))
        };
        let stream = self.spec.stream.unwrap_or(true);
        let mut body = Map::new();
        body.insert(
            "model".into(),
            json!(self.spec.model.as_deref().unwrap_or("default")),
        );
        let turn_no = turn.as_ref().map(|t| t.turn);
        if let Some(t) = turn {
            body.insert("messages".into(), Value::Array(t.messages));
        } else if self.endpoint == Endpoint::Chat {
            body.insert(
                "messages".into(),
                json!([{"role": "user", "content": prompt}]),
            );
        } else {
            body.insert("prompt".into(), json!(prompt));
        }
        if let Some(n) = max_tokens {
            body.insert("max_tokens".into(), json!(n));
        }
        if let Some(t) = &self.spec.temperature {
            body.insert("temperature".into(), t.render(ctx));
        }
        // A replayed trace row asks for exactly its output length.
        if let Some(ignore) = self
            .spec
            .ignore_eos
            .or(self.replay.is_some().then_some(true))
        {
            body.insert("ignore_eos".into(), json!(ignore));
        }
        if let Some(k) = self.spec.conversation.as_ref().and_then(|c| c.logprobs) {
            body.insert("logprobs".into(), json!(true));
            body.insert("top_logprobs".into(), json!(k));
        }
        body.insert("stream".into(), json!(stream));
        if stream {
            body.insert("stream_options".into(), json!({"include_usage": true}));
        }
        body.extend(extra(self.spec.body.as_ref(), ctx));
        if chaos == Some(Chaos::MaxTokensOne) {
            body.insert("max_tokens".into(), json!(1));
        }
        let max_tokens = body
            .get("max_tokens")
            .and_then(Value::as_u64)
            .map(|n| n as u32);
        Prepared {
            body: Bytes::from(Value::Object(body).to_string()),
            chaos,
            max_tokens,
            stream,
            sample_recall: false,
            turn: turn_no,
            keep_text: self.check.is_some(),
            query: None,
            task: None,
        }
    }

    /// Executes a prepared request into `rec` (no timeout here; the engine adds it): the
    /// answer's text when `p.keep_text` and it succeeded, and a sampled vector query's
    /// ground truth still to compute.
    pub async fn execute(
        &self,
        via: &mut Via<'_>,
        target: &Target,
        p: Prepared,
        rec: &mut RequestRecord,
        t0: Instant,
    ) -> Executed {
        rec.chaos = p.chaos;
        rec.turn = p.turn;
        let mut text = None;
        let mut truth = None;
        // Only the plain request's future is kept inline: the others are boxed, so that this
        // future stays a few hundred bytes. The engine moves it (into its timeout, its select)
        // on every request, and inline it was the size of the largest branch (~7 KB of memcpy,
        // 8% of a plain-HTTP run's CPU).
        match self.endpoint {
            _ if self.pipeline.is_some() => {
                text = Box::pin(self.run_task(via, p, rec, t0)).await;
            }
            Endpoint::Chat | Endpoint::Completions => {
                let req = target.request_to(&self.method, self.uri.clone(), p.body, &self.headers);
                let how = openai::Call {
                    stream: p.stream,
                    abort_after_first: p.chaos == Some(Chaos::AbortMidStream),
                    keep_text: p.keep_text,
                };
                text = Box::pin(openai::call(via, req, rec, t0, how)).await;
            }
            Endpoint::VectorSearch => {
                if let Some(v) = &self.vector {
                    let call = VectorCall {
                        phase: v,
                        query: p.query,
                        sampled: p.sample_recall,
                        headers: &self.headers,
                    };
                    truth = Box::pin(vector::call(via, target, p.body, call, rec, t0)).await;
                }
            }
            Endpoint::Http => {
                let req = target.request_to(&self.method, self.uri.clone(), p.body, &self.headers);
                plain(via, req, rec, t0).await;
            }
        }
        rec.good =
            rec.error.is_none() && self.slos.iter().all(|s| s.request_ok(rec).unwrap_or(true));
        if let Some(c) = &self.check {
            rec.check = Some(
                rec.error.is_none() && c.passes(text.as_deref().unwrap_or_default(), rec.e2e_us()),
            );
        }
        Executed {
            text: text.filter(|_| rec.error.is_none()),
            truth,
        }
    }

    /// Runs a pipeline task into `rec`; its final answer's text unless it failed. Its steps go
    /// to several services, so it needs the run's pool.
    async fn run_task(
        &self,
        via: &mut Via<'_>,
        p: Prepared,
        rec: &mut RequestRecord,
        t0: Instant,
    ) -> Option<String> {
        let (Some(pipe), Some(task)) = (&self.pipeline, p.task) else {
            rec.fail(
                crate::measure::ErrorClass::MalformedStream,
                "internal error: a pipeline task without its query",
            );
            return None;
        };
        let Via::Pool(client) = via else {
            rec.fail(
                crate::measure::ErrorClass::Connect,
                "internal error: a pipeline task needs the run's connection pool",
            );
            return None;
        };
        pipeline::run(pipe, client, &self.headers, *task, rec, t0).await
    }

    /// The phase's request headers.
    #[must_use]
    pub fn headers(&self) -> &[(HeaderName, HeaderValue)] {
        &self.headers
    }

    /// Whether the phase's vector queries are text (the server embeds them).
    #[must_use]
    pub fn text_queries(&self) -> bool {
        self.spec.text.is_some()
    }
}

impl Prepared {
    /// A request with an empty body and nothing set.
    #[must_use]
    pub fn empty() -> Self {
        Prepared {
            body: Bytes::new(),
            chaos: None,
            max_tokens: None,
            stream: false,
            sample_recall: false,
            turn: None,
            keep_text: false,
            query: None,
            task: None,
        }
    }
}

/// The request's own headers (`request.headers`), parsed.
fn request_headers(spec: &RequestSpec) -> Result<Vec<(HeaderName, HeaderValue)>, TargetError> {
    spec.headers
        .iter()
        .map(|(k, v)| {
            Ok((
                k.parse().map_err(|_| TargetError::Header(k.clone()))?,
                v.parse().map_err(|_| TargetError::Header(k.clone()))?,
            ))
        })
        .collect()
}

/// A pipeline phase's steps, compiled against `target`; the request's model is theirs.
fn compile_pipeline(
    spec: &RequestSpec,
    phase: &str,
    target: &Target,
) -> Result<Option<Pipeline>, TargetError> {
    let model = spec.model.as_deref().unwrap_or("default");
    spec.pipeline
        .as_ref()
        .map(|p| Pipeline::new(p, phase, model, target))
        .transpose()
}

/// The object a body template renders to, to merge into a generated body.
fn extra(t: Option<&JsonTemplate>, ctx: &mut Ctx<'_, SmallRng>) -> Map<String, Value> {
    match t.map(|t| t.render(ctx)) {
        Some(Value::Object(m)) => m,
        _ => Map::new(),
    }
}

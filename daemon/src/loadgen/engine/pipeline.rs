//! Running a client-orchestrated pipeline task (`request.pipeline`): its steps one after the
//! other, each against its own service, each under its deadline, a failed step replaced by its
//! fallback or ending the task.
//!
//! The task is one [`RequestRecord`]: from its intended start (the arrival's scheduled time,
//! so coordinated omission is handled for the task as for a single request) to its last step's
//! end, with the final chat's tokens, status and connection. Each step leaves a
//! [`StepRecord`] in it; the tally aggregates them per phase (`measure::pipeline`).
//!
//! What flows between steps: `embed` gives the query's vector; `search` the documents (each
//! hit's text from the step's `texts` path, or a passage made up from its id); `rerank` orders
//! and cuts them; `chat` sends them in its prompt (`${docs}`), offering the `tools` step's
//! functions; `tools` calls each function the answer asks for (posting its arguments) and sends
//! the conversation on with the results, up to `max_depth` rounds.

use std::{collections::BTreeMap, fmt::Write as _, sync::Arc, time::Instant};

use bytes::Bytes;
use hyper::{
    Method, Uri,
    header::{HeaderName, HeaderValue},
};
use rand::rngs::SmallRng;
use serde_json::{Map, Value, json};

use crate::loadgen::{
    client::{HttpClient, Target, TargetError, openai, rag, us_since, via::Via},
    engine::vector::{ApiKind, VectorPhase},
    scenario::{
        body::Var,
        json_path::JsonPath,
        pipeline::{ChatPrompt, Fallback, PipelineSpec, PromptPart, StepDetail, StepSpec},
        template::Ctx,
    },
};
use crate::measure::{
    record::{ErrorClass, RequestRecord, StepKind, StepOutcome, StepRecord},
    trace_context::{TraceContext, TraceId},
};

/// Collection of the Chroma and Qdrant adapters when a search step names none.
const DEFAULT_COLLECTION: &str = "inferscope";
/// Words of a passage made up for a hit without text.
const PASSAGE_WORDS: usize = 32;
/// The words those passages are made of.
const WORDS: [&str; 26] = [
    "cache",
    "kernel",
    "latency",
    "queue",
    "memory",
    "token",
    "batch",
    "index",
    "vector",
    "search",
    "prefill",
    "decode",
    "model",
    "server",
    "request",
    "stream",
    "retry",
    "load",
    "block",
    "eviction",
    "replica",
    "shard",
    "network",
    "thread",
    "scheduler",
    "gpu",
];

/// A phase's pipeline, compiled: every step's service, request URI and settings.
#[derive(Debug)]
pub struct Pipeline {
    /// The steps, in order.
    pub steps: Vec<Step>,
}

/// One compiled step.
#[derive(Debug)]
pub struct Step {
    /// The kind.
    pub kind: StepKind,
    /// Its service (scheme, authority, the scenario's headers and TLS).
    pub target: Target,
    uri: Uri,
    model: String,
    deadline: Option<std::time::Duration>,
    fallback: Option<Fallback>,
    /// What the kind alone needs.
    pub detail: Detail,
}

/// A compiled step's own settings.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // one per step of a phase, compiled once
pub enum Detail {
    /// `embed`.
    Embed,
    /// `search`: the vector API (completed by the vector setup before the run).
    Search {
        /// The vector settings, as a vector phase's.
        vector: VectorPhase,
        /// Where each hit's text is.
        texts: Option<JsonPath>,
    },
    /// `rerank`.
    Rerank {
        /// Documents kept.
        top_n: Option<u32>,
    },
    /// `chat`.
    Chat {
        /// The prompt.
        prompt: ChatPrompt,
        /// Where and how the chat is sent.
        call: Arc<ChatCall>,
    },
    /// `tools`.
    Tools {
        /// Rounds at most.
        max_depth: u32,
        /// Tool name -> its service and URI.
        endpoints: BTreeMap<String, (Target, Uri)>,
        /// The chat step's request, which each round's continuation is.
        call: Arc<ChatCall>,
    },
}

/// The chat step's request: its service, model, `max_tokens` and the tools it offers.
#[derive(Debug)]
pub struct ChatCall {
    target: Target,
    uri: Uri,
    model: String,
    max_tokens: Option<u32>,
    /// The function definitions offered (the `tools` step's), empty without one.
    tools: Vec<Value>,
}

/// What a task needs besides the pipeline: its query and its chat prompt's rendered text.
#[derive(Debug, Clone)]
pub struct TaskInput {
    /// The query.
    pub query: String,
    /// The chat prompt, its template pieces rendered (`${docs}` and `${query}` left).
    pub prompt: Vec<Rendered>,
}

/// A piece of a rendered chat prompt.
#[derive(Debug, Clone)]
pub enum Rendered {
    /// Text.
    Text(String),
    /// The documents.
    Docs,
    /// The query.
    Query,
}

impl Pipeline {
    /// Compiles `spec` for phase `phase`: each step's service is its `url` or `target`;
    /// `model` is the request's (the step's own wins).
    pub fn new(
        spec: &PipelineSpec,
        phase: &str,
        model: &str,
        target: &Target,
    ) -> Result<Self, TargetError> {
        let tools: Vec<Value> = spec
            .steps
            .iter()
            .find_map(|s| match &s.detail {
                StepDetail::Tools { endpoints, .. } => {
                    Some(endpoints.keys().map(|n| tool_def(n)).collect())
                }
                _ => None,
            })
            .unwrap_or_default();
        // Validation makes a chat step sure; without one the tools step has nothing to go on.
        let chat = spec
            .steps
            .iter()
            .find(|s| s.kind == StepKind::Chat)
            .map(|s| {
                let (target, uri) = service(s, target)?;
                Ok::<_, TargetError>(Arc::new(ChatCall {
                    target,
                    uri,
                    model: s.model.clone().unwrap_or_else(|| model.to_owned()),
                    max_tokens: match &s.detail {
                        StepDetail::Chat { max_tokens, .. } => *max_tokens,
                        _ => None,
                    },
                    tools,
                }))
            })
            .transpose()?
            .ok_or_else(|| TargetError::Path("a pipeline needs a `chat` step".into()))?;
        let steps = spec
            .steps
            .iter()
            .map(|s| Step::new(s, phase, model, target, &chat))
            .collect::<Result<_, _>>()?;
        Ok(Self { steps })
    }

    /// Every service the pipeline calls (steps and tools), as their URLs' hosts with the URL,
    /// for the loopback guardrail.
    #[must_use]
    pub fn hosts(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for s in &self.steps {
            out.push((s.target.host().to_owned(), s.uri.to_string()));
            if let Detail::Tools { endpoints, .. } = &s.detail {
                for (t, uri) in endpoints.values() {
                    out.push((t.host().to_owned(), uri.to_string()));
                }
            }
        }
        out
    }

    /// Renders a task's query and its chat prompt's pieces: `query` is the request's prompt
    /// (rendered by the caller with the same `ctx`).
    pub fn task(&self, query: String, ctx: &mut Ctx<'_, SmallRng>) -> TaskInput {
        let prompt = self
            .steps
            .iter()
            .find_map(|s| match &s.detail {
                Detail::Chat { prompt, .. } => Some(prompt),
                _ => None,
            })
            .map(|p| {
                p.parts
                    .iter()
                    .map(|part| match part {
                        PromptPart::Text(t) => Rendered::Text(t.render(ctx)),
                        PromptPart::Docs => Rendered::Docs,
                        PromptPart::Query => Rendered::Query,
                    })
                    .collect()
            })
            .unwrap_or_default();
        TaskInput { query, prompt }
    }
}

/// The function definition offered for tool `name`: one string argument, `query`.
fn tool_def(name: &str) -> Value {
    json!({"type": "function", "function": {
        "name": name,
        "description": format!("The {name} tool."),
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    }})
}

/// Where a step's requests go: its `url` (or `target`) and its path under it (the URL's own
/// path first).
fn service(s: &StepSpec, target: &Target) -> Result<(Target, Uri), TargetError> {
    {
        let here = match &s.url {
            Some(url) => target.at(url)?,
            None => target.clone(),
        };
        let base = s
            .url
            .as_deref()
            .and_then(Target::url_path)
            .unwrap_or_default();
        let default_path = match (&s.detail, s.kind) {
            (
                StepDetail::Search {
                    api, collection, ..
                },
                _,
            ) => match api {
                ApiKind::Qdrant => format!(
                    "/collections/{}/points/search",
                    collection.as_deref().unwrap_or(DEFAULT_COLLECTION)
                ),
                ApiKind::Chroma => crate::loadgen::engine::vector::api::chroma_collections(),
                _ => "/v1/vector/search".to_owned(),
            },
            (_, StepKind::Embed) => "/v1/embeddings".to_owned(),
            (_, StepKind::Rerank) => "/v1/rerank".to_owned(),
            _ => "/v1/chat/completions".to_owned(),
        };
        let path = format!(
            "{}{}",
            base.trim_end_matches('/'),
            s.path.clone().unwrap_or(default_path)
        );
        let uri = here.uri(&path)?;
        Ok((here, uri))
    }
}

impl Step {
    fn new(
        s: &StepSpec,
        phase: &str,
        model: &str,
        target: &Target,
        chat: &Arc<ChatCall>,
    ) -> Result<Self, TargetError> {
        let (here, uri) = service(s, target)?;
        let path = uri.path().to_owned();
        let detail = match &s.detail {
            StepDetail::Embed => Detail::Embed,
            StepDetail::Search {
                api,
                collection,
                top_k,
                ef_search,
                json,
                texts,
            } => {
                let qdrant_query = *api == ApiKind::Qdrant && path.ends_with("/points/query");
                Detail::Search {
                    vector: VectorPhase {
                        phase: format!("{phase} (pipeline step search)"),
                        api: *api,
                        method: Method::POST,
                        search: uri.clone(),
                        collection_uri: None,
                        exact_uri: None,
                        paths: json.as_ref().map_or_else(
                            || {
                                if qdrant_query {
                                    crate::loadgen::engine::vector::api::qdrant_query_paths()
                                } else {
                                    api.paths()
                                }
                            },
                            |j| crate::loadgen::scenario::body::AnswerPaths {
                                ids: j.ids.clone(),
                                scores: j.scores.clone(),
                            },
                        ),
                        json: json.clone(),
                        collection: collection
                            .clone()
                            .unwrap_or_else(|| DEFAULT_COLLECTION.to_owned()),
                        dims: None,
                        top_k: *top_k as usize,
                        ef_search: *ef_search,
                        corpus_spec: None,
                        corpus: None,
                        recall_sample: 0.0,
                        qdrant_query,
                    },
                    texts: texts.clone(),
                }
            }
            StepDetail::Rerank { top_n } => Detail::Rerank { top_n: *top_n },
            StepDetail::Chat { prompt, .. } => Detail::Chat {
                prompt: prompt.clone(),
                call: chat.clone(),
            },
            StepDetail::Tools {
                max_depth,
                endpoints,
            } => Detail::Tools {
                max_depth: *max_depth,
                endpoints: endpoints
                    .iter()
                    .map(|(name, to)| {
                        let (t, p) = if to.starts_with('/') {
                            (here.clone(), to.clone())
                        } else {
                            let t = target.at(to)?;
                            let p = Target::url_path(to).unwrap_or_else(|| "/".into());
                            (t, p)
                        };
                        let uri = t.uri(&p)?;
                        Ok((name.clone(), (t, uri)))
                    })
                    .collect::<Result<_, TargetError>>()?,
                call: chat.clone(),
            },
        };
        Ok(Self {
            kind: s.kind,
            target: here,
            uri,
            model: s.model.clone().unwrap_or_else(|| model.to_owned()),
            deadline: s.deadline,
            fallback: s.fallback.clone(),
            detail,
        })
    }
}

/// What the steps hand on to each other within one task.
#[derive(Default)]
struct State {
    query: String,
    vector: Option<Vec<f32>>,
    docs: Vec<String>,
    /// The chat's conversation so far (the tools step sends it on).
    messages: Vec<Value>,
    /// The last chat answer's text.
    answer: Option<String>,
    /// The last chat answer's tool calls.
    tool_calls: Vec<openai::ToolCall>,
    /// Tool-call rounds done.
    depth: u32,
    /// TTFT of the last chat request, from its send (µs).
    ttft_us: Option<u64>,
}

/// A step's failure: its class and detail.
type Failure = (ErrorClass, String);

/// What one exchange of a step needs.
struct Io<'a> {
    client: &'a HttpClient,
    headers: &'a [(HeaderName, HeaderValue)],
    t0: Instant,
    /// The task's trace: each exchange is a span of it (`None`: no trace headers).
    trace: Option<TraceId>,
}

impl Io<'_> {
    /// A fresh record for one exchange, due now, with a span of the task's trace.
    fn record(&self) -> RequestRecord {
        let mut r = RequestRecord::new(0, 0, crate::measure::Endpoint::Chat, us_since(self.t0));
        r.trace = self.trace.map(TraceContext::new_span);
        r
    }

    fn request(
        &self,
        step: &Step,
        uri: Uri,
        body: Bytes,
    ) -> hyper::Request<http_body_util::Full<Bytes>> {
        step.target
            .request_to(&Method::POST, uri, body, self.headers)
    }
}

fn failed(x: &RequestRecord) -> Failure {
    (
        x.error.unwrap_or(ErrorClass::MalformedStream),
        x.error_message.clone().unwrap_or_default(),
    )
}

/// Runs a task's steps into `rec` (its intended start already set); the final answer's text
/// when the task did not fail. No overall timeout here: the engine puts the scenario's
/// `timeout` around the whole task.
pub async fn run(
    pipeline: &Pipeline,
    client: &HttpClient,
    headers: &[(HeaderName, HeaderValue)],
    task: TaskInput,
    rec: &mut RequestRecord,
    t0: Instant,
) -> Option<String> {
    let io = Io {
        client,
        headers,
        t0,
        trace: rec.trace.map(|t| t.trace_id()),
    };
    rec.actual_us = us_since(t0);
    let mut st = State {
        query: task.query.clone(),
        ..State::default()
    };
    let has_tools = pipeline.steps.iter().any(|s| s.kind == StepKind::Tools);
    if has_tools {
        rec.tool_depth = Some(0);
    }
    for step in &pipeline.steps {
        let start_us = us_since(t0);
        let mut calls = 0u32;
        let fut = step.run(&io, &task, &mut st, rec, &mut calls);
        let result = match step.deadline {
            Some(d) => tokio::time::timeout(d, fut).await.unwrap_or_else(|_| {
                Err((
                    ErrorClass::Timeout,
                    format!("step deadline {} passed", humantime::format_duration(d)),
                ))
            }),
            None => fut.await,
        };
        let end_us = us_since(t0);
        if has_tools {
            rec.tool_depth = Some(st.depth);
        }
        let mut srec = StepRecord {
            kind: step.kind,
            start_us,
            end_us,
            outcome: StepOutcome::Ok,
            calls,
            error: None,
            error_message: None,
            ttft_us: None,
        };
        match result {
            Ok(true) => {
                if matches!(step.kind, StepKind::Chat | StepKind::Tools) {
                    srec.ttft_us = st.ttft_us;
                }
            }
            Ok(false) => srec.outcome = StepOutcome::Skipped,
            Err((class, msg)) => {
                srec.error = Some(class);
                srec.error_message = Some(msg.clone());
                if let Some(fb) = &step.fallback {
                    srec.outcome = StepOutcome::Fallback;
                    st.stand_in(step.kind, fb);
                } else {
                    srec.outcome = StepOutcome::Failed;
                    rec.steps.push(srec);
                    rec.end_us = us_since(t0);
                    rec.fail(
                        class,
                        format!("pipeline step `{}`: {msg}", step.kind.name()),
                    );
                    return None;
                }
            }
        }
        rec.steps.push(srec);
    }
    rec.end_us = us_since(t0);
    Some(st.answer.unwrap_or_default())
}

impl State {
    /// Puts a fallback in place of a failed step's result.
    fn stand_in(&mut self, kind: StepKind, fb: &Fallback) {
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .into_iter()
                .flatten()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect()
        };
        match (kind, fb) {
            (StepKind::Embed, Fallback::Skip) => self.vector = None,
            (StepKind::Embed, Fallback::Default(v)) => {
                self.vector = v.as_array().map(|a| {
                    a.iter()
                        .filter_map(Value::as_f64)
                        .map(|f| f as f32)
                        .collect()
                });
            }
            (StepKind::Search, Fallback::Skip) => self.docs.clear(),
            // The documents as they came (skip), or the default ones.
            (StepKind::Search | StepKind::Rerank, Fallback::Default(v)) => self.docs = strings(v),
            (StepKind::Rerank, Fallback::Skip) => {}
            (StepKind::Chat, Fallback::Skip) => {
                self.answer = None;
                self.tool_calls.clear();
            }
            (StepKind::Chat | StepKind::Tools, Fallback::Default(v)) => {
                self.answer = v.as_str().map(str::to_owned);
                self.tool_calls.clear();
            }
            // The answer so far.
            (StepKind::Tools, Fallback::Skip) => self.tool_calls.clear(),
        }
    }
}

impl Step {
    /// Runs the step: `Ok(true)` when it did its work, `Ok(false)` when it had nothing to do.
    async fn run(
        &self,
        io: &Io<'_>,
        task: &TaskInput,
        st: &mut State,
        rec: &mut RequestRecord,
        calls: &mut u32,
    ) -> Result<bool, Failure> {
        match &self.detail {
            Detail::Embed => {
                let mut x = io.record();
                *calls += 1;
                let req = io.request(
                    self,
                    self.uri.clone(),
                    rag::embed_body(&self.model, &st.query),
                );
                let v = rag::embed(&mut Via::Pool(io.client), req, &mut x, io.t0).await;
                st.vector = Some(v.ok_or_else(|| failed(&x))?);
                Ok(true)
            }
            Detail::Search { vector, texts } => {
                let text_ok = match vector.api {
                    ApiKind::Sim => true,
                    ApiKind::Json => vector.json.as_ref().is_some_and(|j| j.body.uses(Var::Text)),
                    ApiKind::Chroma | ApiKind::Qdrant => false,
                };
                let (q, text) = match (&st.vector, text_ok) {
                    (Some(v), _) => (Some(v.as_slice()), None),
                    (None, true) => (None, Some(st.query.as_str())),
                    (None, false) => {
                        return Err((
                            ErrorClass::MalformedStream,
                            format!(
                                "the {} API searches by vector and the task has none (no embed step, or it was skipped)",
                                vector.api.name()
                            ),
                        ));
                    }
                };
                let body = vector.body(q, text, Map::new());
                let mut x = io.record();
                *calls += 1;
                let req = io.request(self, vector.search_uri(), body);
                let docs = rag::search(
                    &mut Via::Pool(io.client),
                    req,
                    &vector.paths,
                    texts.as_ref(),
                    &mut x,
                    io.t0,
                )
                .await
                .ok_or_else(|| failed(&x))?;
                st.docs = docs
                    .into_iter()
                    .map(|(id, text)| text.unwrap_or_else(|| passage(&id)))
                    .collect();
                Ok(true)
            }
            Detail::Rerank { top_n } => {
                if st.docs.is_empty() {
                    return Ok(false);
                }
                let mut x = io.record();
                *calls += 1;
                let body = rag::rerank_body(&self.model, &st.query, &st.docs, *top_n);
                let req = io.request(self, self.uri.clone(), body);
                let order =
                    rag::rerank(&mut Via::Pool(io.client), req, st.docs.len(), &mut x, io.t0)
                        .await
                        .ok_or_else(|| failed(&x))?;
                let docs = std::mem::take(&mut st.docs);
                st.docs = order.into_iter().map(|i| docs[i].clone()).collect();
                if let Some(n) = top_n {
                    st.docs.truncate(*n as usize);
                }
                Ok(true)
            }
            Detail::Chat { call, .. } => {
                let content = prompt_text(&task.prompt, &st.query, &st.docs);
                st.messages = vec![json!({"role": "user", "content": content})];
                chat(call, io, st, rec, calls).await?;
                Ok(true)
            }
            Detail::Tools {
                max_depth,
                endpoints,
                call: chat_call,
            } => tools(io, st, rec, calls, *max_depth, endpoints, chat_call).await,
        }
    }
}

/// The `tools` step: while the answer calls tools (at most `max_depth` rounds), each call's
/// arguments go to its endpoint and the conversation goes on with the results. `Ok(false)`
/// when the answer called none.
async fn tools(
    io: &Io<'_>,
    st: &mut State,
    rec: &mut RequestRecord,
    calls: &mut u32,
    max_depth: u32,
    endpoints: &BTreeMap<String, (Target, Uri)>,
    chat_call: &ChatCall,
) -> Result<bool, Failure> {
    // An answer without a tool call needs no tool.
    if st.tool_calls.is_empty() {
        return Ok(false);
    }
    while !st.tool_calls.is_empty() && st.depth < max_depth {
        st.depth += 1;
        let asked = std::mem::take(&mut st.tool_calls);
        st.messages.push(json!({"role": "assistant", "content": null,
                "tool_calls": asked.iter().map(|c| json!({"id": c.id, "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments}})).collect::<Vec<_>>()}));
        for call in &asked {
            let (t, uri) = endpoints.get(&call.name).ok_or_else(|| {
                (
                    ErrorClass::MalformedStream,
                    format!(
                        "the model called tool {:?}, which `endpoints` does not name",
                        call.name
                    ),
                )
            })?;
            let mut x = io.record();
            *calls += 1;
            let args = if call.arguments.trim().is_empty() {
                "{}".to_owned()
            } else {
                call.arguments.clone()
            };
            let req = t.request_to(&Method::POST, uri.clone(), Bytes::from(args), io.headers);
            let result = rag::tool(&mut Via::Pool(io.client), req, &mut x, io.t0)
                .await
                .ok_or_else(|| failed(&x))?;
            st.messages
                .push(json!({"role": "tool", "tool_call_id": call.id, "content": result}));
        }
        chat(chat_call, io, st, rec, calls).await?;
    }
    Ok(true)
}

/// Sends the conversation so far (streamed, offering the tools) and reads the answer: its
/// text and tool calls into `st`, its tokens, usage and connection into the task's record
/// (the final chat's are the task's).
async fn chat(
    call: &ChatCall,
    io: &Io<'_>,
    st: &mut State,
    rec: &mut RequestRecord,
    calls: &mut u32,
) -> Result<(), Failure> {
    let mut body = json!({"model": call.model, "messages": st.messages, "stream": true,
        "stream_options": {"include_usage": true}});
    if let Some(n) = call.max_tokens {
        body["max_tokens"] = json!(n);
    }
    if !call.tools.is_empty() {
        body["tools"] = json!(call.tools);
    }
    let req = call.target.request_to(
        &Method::POST,
        call.uri.clone(),
        Bytes::from(body.to_string()),
        io.headers,
    );
    let mut x = io.record();
    *calls += 1;
    let how = openai::Call {
        stream: true,
        abort_after_first: false,
        keep_text: true,
    };
    let answer = openai::answer(&mut Via::Pool(io.client), req, &mut x, io.t0, how).await;
    if x.error.is_some() {
        return Err(failed(&x));
    }
    if !answer.tool_calls.is_empty() && x.finish_reason.as_deref() == Some("length") {
        return Err((
            ErrorClass::MalformedStream,
            "max_tokens cut the answer's tool call (finish_reason length): raise the chat step's max_tokens".into(),
        ));
    }
    st.ttft_us = x.token_us.first().map(|t| t.saturating_sub(x.actual_us));
    st.answer = answer.text;
    st.tool_calls = answer.tool_calls;
    rec.first_byte_us = x.first_byte_us;
    rec.status = x.status;
    rec.local_addr = x.local_addr;
    rec.remote_addr = x.remote_addr;
    rec.input_tokens = x.input_tokens;
    rec.output_tokens = x.output_tokens;
    rec.token_source = x.token_source;
    rec.finish_reason = x.finish_reason;
    rec.token_us = x.token_us;
    rec.reconnected |= x.reconnected;
    Ok(())
}

/// The chat prompt's text: the pieces, `${docs}` numbered one per line.
fn prompt_text(parts: &[Rendered], query: &str, docs: &[String]) -> String {
    let mut out = String::new();
    for p in parts {
        match p {
            Rendered::Text(t) => out.push_str(t),
            Rendered::Query => out.push_str(query),
            Rendered::Docs => {
                for (i, d) in docs.iter().enumerate() {
                    if i > 0 {
                        out.push('\n');
                    }
                    let _ = write!(out, "[{}] {d}", i + 1);
                }
            }
        }
    }
    out
}

/// A passage made up for hit `id` (a vector API that returns no text): the same for the same
/// id, made of words a re-ranker can score.
fn passage(id: &str) -> String {
    // FNV-1a of the id, then a mix per word.
    let mut h = id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let mut words = Vec::with_capacity(PASSAGE_WORDS);
    for _ in 0..PASSAGE_WORDS {
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 29;
        words.push(WORDS[(h % WORDS.len() as u64) as usize]);
    }
    format!("passage {id}: {}", words.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_and_passages() {
        let parts = vec![
            Rendered::Text("C:\n".into()),
            Rendered::Docs,
            Rendered::Text("\nQ: ".into()),
            Rendered::Query,
        ];
        let docs = vec!["a".to_owned(), "b".to_owned()];
        assert_eq!(
            prompt_text(&parts, "why", &docs),
            "C:\n[1] a\n[2] b\nQ: why"
        );
        assert_eq!(passage("7"), passage("7"));
        assert_ne!(passage("7"), passage("8"));
        assert!(passage("7").starts_with("passage 7: "));
    }

    #[test]
    fn fallbacks_stand_in() {
        let mut st = State {
            docs: vec!["x".into()],
            ..State::default()
        };
        st.stand_in(StepKind::Rerank, &Fallback::Skip);
        assert_eq!(st.docs, ["x"]);
        st.stand_in(StepKind::Search, &Fallback::Default(json!(["d1", "d2"])));
        assert_eq!(st.docs, ["d1", "d2"]);
        st.stand_in(StepKind::Embed, &Fallback::Default(json!([0.5, 1])));
        assert_eq!(st.vector, Some(vec![0.5, 1.0]));
        st.stand_in(StepKind::Chat, &Fallback::Default(json!("sorry")));
        assert_eq!(st.answer.as_deref(), Some("sorry"));
    }
}

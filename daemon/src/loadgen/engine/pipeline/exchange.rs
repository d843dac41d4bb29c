//! What each step kind sends and reads: an embedding, a search's documents, a re-ranked order,
//! a chat answer, and the tool calls it asks for, sent on with their results.

use std::collections::BTreeMap;

use bytes::Bytes;
use hyper::{Method, Uri};
use serde_json::{Map, json};

use super::compile::TaskInput;
use super::state::{Failure, Io, State, failed};
use super::step::{ChatCall, Detail, Step};
use super::text::{passage, prompt_text};
use crate::loadgen::{
    client::{Target, openai, rag, via::Via},
    engine::vector::ApiKind,
    scenario::body::Var,
};
use crate::measure::record::{ErrorClass, RequestRecord};

impl Step {
    /// Runs the step: `Ok(true)` when it did its work, `Ok(false)` when it had nothing to do.
    pub(super) async fn run(
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

//! OpenAI-compatible chat and completions: request bodies, and reading answers
//! (streamed SSE or whole JSON) into token times, usage and `finish_reason`.
//!
//! Output tokens come from the server's `usage.completion_tokens` (streaming requests ask
//! for it with `stream_options.include_usage`). Without usage the count falls back to the
//! number of content-bearing deltas ([`TokenSource::Deltas`]): exact for servers that send
//! one token per chunk, an under-count for those that batch tokens (speculative decoding).
//! A stream that ends without `[DONE]` is accepted when a `finish_reason` was seen (some
//! servers omit `[DONE]`); without either it is a truncated stream (`malformed_stream`).

use std::{borrow::Cow, time::Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::Request;
use serde_json::Value;

use crate::loadgen::{
    client::sse::{SseParser, Tail},
    client::{
        fail_status, read_body, us_since,
        via::{Via, send},
    },
};

use crate::measure::record::{ErrorClass, RequestRecord, TokenSource};

/// Longest model answer kept in a conversation's history, bytes (the rest is cut: a bounded
/// history).
pub const MAX_REPLY_BYTES: usize = 64 << 10;

/// Content chunks one answer may carry (their times are kept: 8 bytes each).
pub const MAX_TOKEN_TIMES: usize = 1 << 20;

/// State of one streamed answer, fed with body pieces as they arrive.
#[derive(Debug, Default)]
pub struct StreamState {
    parser: SseParser,
    events: Vec<crate::loadgen::client::sse::SseEvent>,
    /// Time of each content-bearing delta (µs since run start).
    pub token_us: Vec<u64>,
    /// `usage.completion_tokens`.
    pub usage_output: Option<u32>,
    /// `usage.prompt_tokens`.
    pub usage_input: Option<u32>,
    /// `finish_reason` of choice 0.
    pub finish_reason: Option<String>,
    /// `[DONE]` was seen.
    pub done: bool,
    /// The answer's text, when kept (see [`StreamState::keeping_text`]); at most
    /// [`MAX_REPLY_BYTES`].
    pub text: Option<String>,
    /// Sum and count of the tokens' entropies from their `top_logprobs` (nats).
    entropy: (f64, u64),
    /// The tool calls of choice 0, their streamed pieces put together.
    pub tool_calls: Vec<ToolCall>,
}

/// A tool call a chat answer made (`choices[0].message.tool_calls`, or its streamed pieces).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolCall {
    /// `id` (`call_...`), sent back with the tool's result.
    pub id: String,
    /// The function called.
    pub name: String,
    /// Its arguments: a JSON object as text.
    pub arguments: String,
}

/// One streamed piece of a tool call (`delta.tool_calls[i]`); a whole answer's calls read
/// the same way (`message.tool_calls[i]`, without `index`).
#[derive(Debug, serde::Deserialize)]
struct ToolCallPiece {
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionPiece>,
}

#[derive(Debug, serde::Deserialize)]
struct FunctionPiece {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

/// Longest tool-call arguments kept, bytes.
const MAX_TOOL_ARGUMENTS: usize = 64 << 10;
/// Most tool calls one answer may make.
const MAX_TOOL_CALLS: usize = 64;

/// A stream that failed.
pub type StreamError = (ErrorClass, String);

/// What one chunk says: whether it carries text, and the finish reason and usage if any.
#[derive(Clone, Copy)]
struct Summary<'a> {
    /// The chunk's text, when not empty.
    text: Option<&'a str>,
    finish_reason: Option<&'a str>,
    completion_tokens: Option<u64>,
    prompt_tokens: Option<u64>,
}

/// The fields of a streamed chunk that matter, borrowed from its text where possible: every
/// token arrives as one of these, so no `Value` tree is built for it.
#[derive(serde::Deserialize)]
struct Chunk<'a> {
    #[serde(default, borrow)]
    choices: Vec<ChunkChoice<'a>>,
    #[serde(default)]
    usage: Option<ChunkUsage>,
    #[serde(default)]
    error: Option<serde::de::IgnoredAny>,
}

#[derive(serde::Deserialize)]
struct ChunkChoice<'a> {
    #[serde(default)]
    logprobs: Option<ChunkLogprobs>,
    #[serde(default, borrow)]
    delta: Option<ChunkDelta<'a>>,
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(serde::Deserialize)]
struct ChunkDelta<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolCallPiece>>,
}

/// `choices[0].logprobs` of a chat answer: per token, the top alternatives.
#[derive(serde::Deserialize)]
struct ChunkLogprobs {
    #[serde(default)]
    content: Option<Vec<TokenLogprobs>>,
}

#[derive(serde::Deserialize)]
struct TokenLogprobs {
    #[serde(default)]
    top_logprobs: Vec<TopLogprob>,
}

#[derive(serde::Deserialize)]
struct TopLogprob {
    logprob: f64,
}

/// Entropy (nats) of one token's distribution from its top-k log-probabilities, the mass
/// outside the top k counted as one more outcome: a lower bound of the true entropy (the tail's
/// own spread is not seen), exact when the top k hold all the mass.
#[must_use]
pub fn token_entropy(logprobs: impl IntoIterator<Item = f64>) -> Option<f64> {
    let mut h = 0.0;
    let mut mass = 0.0;
    let mut n = 0;
    for lp in logprobs {
        let p = lp.exp();
        if p.is_finite() && p > 0.0 {
            h -= p * p.ln();
            mass += p;
            n += 1;
        }
    }
    if n == 0 {
        return None;
    }
    let rest = 1.0 - mass;
    if rest > 1e-12 {
        h -= rest * rest.ln();
    }
    Some(h.max(0.0))
}

#[derive(serde::Deserialize)]
struct ChunkUsage {
    completion_tokens: Option<u64>,
    prompt_tokens: Option<u64>,
}

impl Chunk<'_> {
    /// Entropies of the tokens this chunk carries logprobs for.
    fn entropies(&self) -> impl Iterator<Item = f64> + '_ {
        self.choices
            .first()
            .and_then(|c| c.logprobs.as_ref()?.content.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|t| token_entropy(t.top_logprobs.iter().map(|x| x.logprob)))
    }

    fn summary(&self) -> Summary<'_> {
        let c = self.choices.first();
        let d = c.and_then(|c| c.delta.as_ref());
        // Same precedence as the `Value` path: delta content, text, reasoning content.
        let text = d
            .and_then(|d| d.content.as_deref())
            .or_else(|| c.and_then(|c| c.text.as_deref()))
            .or_else(|| d.and_then(|d| d.reasoning_content.as_deref()));
        Summary {
            text: text.filter(|t| !t.is_empty()),
            finish_reason: c.and_then(|c| c.finish_reason.as_deref()),
            completion_tokens: self.usage.as_ref().and_then(|u| u.completion_tokens),
            prompt_tokens: self.usage.as_ref().and_then(|u| u.prompt_tokens),
        }
    }
}

impl StreamState {
    /// A state that keeps the answer's text.
    #[must_use]
    pub fn keeping_text() -> Self {
        Self {
            text: Some(String::new()),
            ..Self::default()
        }
    }

    /// Feeds a piece of the body received at `now_us`.
    pub fn feed(&mut self, piece: &[u8], now_us: u64) -> Result<(), StreamError> {
        self.parser
            .push(piece, &mut self.events)
            .map_err(|e| (ErrorClass::MalformedStream, e.to_string()))?;
        for ev in std::mem::take(&mut self.events) {
            if self.done {
                continue;
            }
            if ev.event.as_deref() == Some("error") {
                return Err((ErrorClass::ServerErrorEvent, ev.data));
            }
            let data = ev.data.trim();
            if data == "[DONE]" {
                self.done = true;
                continue;
            }
            if self.token_us.len() >= MAX_TOKEN_TIMES {
                return Err((
                    ErrorClass::MalformedStream,
                    format!("more than {MAX_TOKEN_TIMES} content chunks in one answer"),
                ));
            }
            // The common shape, parsed in place; anything unusual (an error object, a field of
            // an unexpected type) goes through a `Value`.
            if let Ok(c) = serde_json::from_str::<Chunk<'_>>(data)
                && c.error.is_none()
            {
                for h in c.entropies() {
                    self.add_entropy(h);
                }
                let pieces = c
                    .choices
                    .first()
                    .and_then(|ch| ch.delta.as_ref())
                    .and_then(|d| d.tool_calls.as_deref())
                    .unwrap_or_default();
                self.add_tool_pieces(pieces);
                self.apply(c.summary(), Some(now_us));
                continue;
            }
            let v: Value = serde_json::from_str(data).map_err(|e| {
                (
                    ErrorClass::MalformedStream,
                    format!("SSE data is not JSON ({e}): {data:.120}"),
                )
            })?;
            if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
                let msg = err
                    .get("message")
                    .and_then(Value::as_str)
                    .map_or_else(|| err.to_string(), str::to_string);
                return Err((ErrorClass::ServerErrorEvent, msg));
            }
            self.absorb(&v, Some(now_us));
        }
        Ok(())
    }

    /// Puts streamed (or whole) tool-call pieces together, by their `index` (a piece
    /// without one is the call at its position).
    fn add_tool_pieces(&mut self, pieces: &[ToolCallPiece]) {
        for (pos, p) in pieces.iter().enumerate() {
            let i = p.index.unwrap_or(pos);
            if i >= MAX_TOOL_CALLS {
                continue;
            }
            if self.tool_calls.len() <= i {
                self.tool_calls.resize_with(i + 1, ToolCall::default);
            }
            let call = &mut self.tool_calls[i];
            if let Some(id) = &p.id {
                call.id.clone_from(id);
            }
            if let Some(f) = &p.function {
                if let Some(n) = &f.name {
                    call.name.clone_from(n);
                }
                if let Some(a) = &f.arguments
                    && call.arguments.len() + a.len() <= MAX_TOOL_ARGUMENTS
                {
                    call.arguments.push_str(a);
                }
            }
        }
    }

    fn add_entropy(&mut self, h: f64) {
        self.entropy.0 += h;
        self.entropy.1 += 1;
    }

    /// Reads one chunk (or a whole non-streamed answer when `now_us` is `None`).
    fn absorb(&mut self, v: &Value, now_us: Option<u64>) {
        let c = v.get("choices").and_then(|c| c.get(0));
        let tokens = c
            .and_then(|c| c.pointer("/logprobs/content"))
            .and_then(Value::as_array);
        for t in tokens.into_iter().flatten() {
            let top = t.get("top_logprobs").and_then(Value::as_array);
            let lps = top
                .into_iter()
                .flatten()
                .filter_map(|x| x.get("logprob").and_then(Value::as_f64));
            if let Some(h) = token_entropy(lps) {
                self.add_entropy(h);
            }
        }
        for at in ["/delta/tool_calls", "/message/tool_calls"] {
            if let Some(pieces) = c
                .and_then(|c| c.pointer(at))
                .and_then(|v| serde_json::from_value::<Vec<ToolCallPiece>>(v.clone()).ok())
            {
                self.add_tool_pieces(&pieces);
            }
        }
        // The first of these that is a string (null counts as absent).
        let text = c.and_then(|c| {
            [
                "/delta/content",
                "/text",
                "/delta/reasoning_content",
                "/message/content",
            ]
            .iter()
            .find_map(|p| c.pointer(p).and_then(Value::as_str))
        });
        let u = v.get("usage").filter(|u| u.is_object());
        let get = |k: &str| u.and_then(|u| u.get(k)).and_then(Value::as_u64);
        self.apply(
            Summary {
                text: text.filter(|t| !t.is_empty()),
                finish_reason: c
                    .and_then(|c| c.get("finish_reason"))
                    .and_then(Value::as_str),
                completion_tokens: get("completion_tokens"),
                prompt_tokens: get("prompt_tokens"),
            },
            now_us,
        );
    }

    fn apply(&mut self, s: Summary<'_>, now_us: Option<u64>) {
        if let (Some(_), Some(now)) = (s.text, now_us) {
            self.token_us.push(now);
        }
        if let (Some(t), Some(kept)) = (s.text, self.text.as_mut()) {
            let room = MAX_REPLY_BYTES.saturating_sub(kept.len());
            let mut end = t.len().min(room);
            while !t.is_char_boundary(end) {
                end -= 1;
            }
            kept.push_str(&t[..end]);
        }
        if let Some(f) = s.finish_reason {
            self.finish_reason = Some(f.to_string());
        }
        self.usage_output = s.completion_tokens.map(|n| n as u32).or(self.usage_output);
        self.usage_input = s.prompt_tokens.map(|n| n as u32).or(self.usage_input);
    }

    /// Ends the stream: success, or why it failed.
    pub fn finish(&mut self) -> Result<(), StreamError> {
        let tail = self.parser.finish();
        if self.done || self.finish_reason.is_some() {
            return Ok(());
        }
        let why = match tail {
            Tail::Truncated => "stream truncated inside an event",
            Tail::Clean => "stream ended without [DONE] or finish_reason",
        };
        Err((ErrorClass::MalformedStream, why.into()))
    }

    /// Copies tokens, usage and finish reason into the record.
    pub fn fill(&self, rec: &mut RequestRecord) {
        rec.entropy = (self.entropy.1 > 0).then(|| self.entropy.0 / self.entropy.1 as f64);
        rec.token_us.clone_from(&self.token_us);
        rec.finish_reason.clone_from(&self.finish_reason);
        rec.input_tokens = self.usage_input;
        if let Some(n) = self.usage_output {
            rec.output_tokens = Some(n);
            rec.token_source = Some(TokenSource::Usage);
        } else if !self.token_us.is_empty() {
            rec.output_tokens = Some(self.token_us.len() as u32);
            rec.token_source = Some(TokenSource::Deltas);
        }
    }
}

/// How to read an answer.
#[derive(Debug, Clone, Copy)]
pub struct Call {
    /// Server-sent events, else one JSON answer.
    pub stream: bool,
    /// The chaos knob that closes the stream after the first token.
    pub abort_after_first: bool,
    /// Keep the answer's text (a conversation's history).
    pub keep_text: bool,
}

/// What a chat answer said.
#[derive(Debug, Default)]
pub struct Answer {
    /// Its text (kept when asked).
    pub text: Option<String>,
    /// The tool calls it made.
    pub tool_calls: Vec<ToolCall>,
}

/// Sends a chat request and reads the answer into `rec`: its text (when `how.keep_text`) and
/// its tool calls.
pub async fn answer(
    via: &mut Via<'_>,
    req: Request<Full<Bytes>>,
    rec: &mut RequestRecord,
    t0: Instant,
    how: Call,
) -> Answer {
    let mut st = if how.keep_text {
        StreamState::keeping_text()
    } else {
        StreamState::default()
    };
    read_answer(via, req, rec, t0, how, &mut st).await;
    Answer {
        text: st.text,
        tool_calls: st.tool_calls,
    }
}

/// Sends a chat/completions request and reads the answer into `rec`; the answer's text when
/// `how.keep_text`.
pub async fn call(
    via: &mut Via<'_>,
    req: Request<Full<Bytes>>,
    rec: &mut RequestRecord,
    t0: Instant,
    how: Call,
) -> Option<String> {
    let mut st = if how.keep_text {
        StreamState::keeping_text()
    } else {
        StreamState::default()
    };
    read_answer(via, req, rec, t0, how, &mut st).await;
    st.text
}

async fn read_answer(
    via: &mut Via<'_>,
    req: Request<Full<Bytes>>,
    rec: &mut RequestRecord,
    t0: Instant,
    how: Call,
    st: &mut StreamState,
) {
    let Call {
        stream,
        abort_after_first,
        ..
    } = how;
    let Ok(resp) = send(via, req, rec, t0).await else {
        return;
    };
    let status = resp.status();
    if !status.is_success() {
        if let Some(body) = read_body(resp, rec, t0).await {
            rec.end_us = us_since(t0);
            fail_status(rec, status.as_u16(), &body);
        }
        return;
    }
    if !stream {
        let Some(body) = read_body(resp, rec, t0).await else {
            return;
        };
        rec.end_us = us_since(t0);
        match serde_json::from_slice::<Value>(&body) {
            Ok(v) if v.get("error").is_some_and(|e| !e.is_null()) => {
                rec.fail(ErrorClass::ServerErrorEvent, v["error"].to_string());
            }
            Ok(v) => {
                st.absorb(&v, None);
                st.fill(rec);
            }
            Err(e) => rec.fail(
                ErrorClass::MalformedStream,
                format!("answer is not JSON: {e}"),
            ),
        }
        return;
    }
    let mut body = resp.into_body();
    loop {
        match body.frame().await {
            None => break,
            Some(Err(e)) => {
                st.fill(rec);
                rec.end_us = us_since(t0);
                rec.fail(
                    ErrorClass::Transport,
                    crate::loadgen::client::error_chain(&e),
                );
                return;
            }
            Some(Ok(frame)) => {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                if let Err((class, msg)) = st.feed(&data, us_since(t0)) {
                    st.fill(rec);
                    rec.end_us = us_since(t0);
                    rec.fail(class, msg);
                    return;
                }
                if abort_after_first && !st.token_us.is_empty() {
                    // Dropping the body closes the connection mid-stream, as a user leaving would.
                    st.fill(rec);
                    rec.end_us = us_since(t0);
                    rec.fail(
                        ErrorClass::Aborted,
                        "client closed the stream after the first token (chaos)",
                    );
                    return;
                }
            }
        }
    }
    rec.end_us = us_since(t0);
    st.fill(rec);
    if let Err((class, msg)) = st.finish() {
        rec.fail(class, msg);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(input: &[u8]) -> (StreamState, Result<(), StreamError>) {
        let mut st = StreamState::default();
        let r = input
            .iter()
            .enumerate()
            .try_for_each(|(i, b)| st.feed(&[*b], i as u64));
        let r = r.and_then(|()| st.finish());
        (st, r)
    }

    const CHAT: &[u8] = b"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n\
data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n\
data: {\"choices\":[{\"delta\":{\"content\":\"lo\"},\"finish_reason\":null}]}\n\n\
data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]}\n\n\
data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":3}}\n\n\
data: [DONE]\n\n";

    #[test]
    fn token_entropy_from_top_logprobs() {
        let ln = f64::ln;
        // Two equal outcomes holding all the mass: ln 2.
        let h = token_entropy([ln(0.5), ln(0.5)]).unwrap();
        assert!((h - 2f64.ln()).abs() < 1e-12);
        // One sure outcome: 0.
        assert!(token_entropy([0.0]).unwrap().abs() < 1e-12);
        // 0.5 seen, 0.5 outside the top k as one outcome: ln 2 (a lower bound).
        let h = token_entropy([ln(0.5)]).unwrap();
        assert!((h - 2f64.ln()).abs() < 1e-12);
        assert_eq!(token_entropy([]), None);
        // A chunk's logprobs feed the record's mean entropy.
        let (st, r) = run(
            b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"},\"logprobs\":{\"content\":[{\"token\":\"a\",\"logprob\":-0.69,\"top_logprobs\":[{\"token\":\"a\",\"logprob\":-0.6931471805599453},{\"token\":\"b\",\"logprob\":-0.6931471805599453}]}]},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
        );
        r.unwrap();
        let mut rec = RequestRecord::new(0, 0, crate::measure::Endpoint::Chat, 0);
        st.fill(&mut rec);
        assert!((rec.entropy.unwrap() - 2f64.ln()).abs() < 1e-9);
    }

    #[test]
    fn streamed_and_whole_tool_calls_are_put_together() {
        let (st, r) = run(b"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"lookup\",\"arguments\":\"{\\\"q\"}}]}}]}\n\n\
data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\": 1}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n");
        assert_eq!(r, Ok(()));
        assert!(st.token_us.is_empty(), "a tool call carries no text");
        assert_eq!(
            st.tool_calls,
            [ToolCall {
                id: "call_1".into(),
                name: "lookup".into(),
                arguments: "{\"q\": 1}".into()
            }]
        );
        let mut whole = StreamState::default();
        whole.absorb(
            &serde_json::json!({"choices": [{"message": {"role": "assistant", "content": null,
                "tool_calls": [{"id": "call_2", "type": "function",
                    "function": {"name": "f", "arguments": "{}"}}]}, "finish_reason": "tool_calls"}]}),
            None,
        );
        assert_eq!(whole.tool_calls.len(), 1);
        assert_eq!(whole.tool_calls[0].name, "f");
    }

    #[test]
    fn chat_stream_with_usage() {
        let (st, r) = run(CHAT);
        assert_eq!(r, Ok(()));
        assert_eq!(st.token_us.len(), 2);
        assert_eq!((st.usage_output, st.usage_input), (Some(3), Some(5)));
        assert_eq!(st.finish_reason.as_deref(), Some("length"));
        let mut rec = RequestRecord::new(0, 0, crate::measure::record::Endpoint::Chat, 0);
        st.fill(&mut rec);
        assert_eq!(
            (rec.output_tokens, rec.token_source),
            (Some(3), Some(TokenSource::Usage))
        );
    }

    #[test]
    fn completions_without_usage_counts_deltas() {
        let (st, r) = run(b"data: {\"choices\":[{\"text\":\"a\"}]}\r\n\r\ndata: {\"choices\":[{\"text\":\"b\",\"finish_reason\":\"stop\"}]}\r\n\r\ndata: [DONE]\r\n\r\n");
        assert_eq!(r, Ok(()));
        let mut rec = RequestRecord::new(0, 0, crate::measure::record::Endpoint::Completions, 0);
        st.fill(&mut rec);
        assert_eq!(
            (rec.output_tokens, rec.token_source),
            (Some(2), Some(TokenSource::Deltas))
        );
    }

    #[test]
    fn missing_done_is_ok_with_finish_reason_else_malformed() {
        let with_finish = &CHAT[..CHAT.len() - b"data: [DONE]\n\n".len()];
        assert_eq!(run(with_finish).1, Ok(()));
        let (_, r) = run(b"data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n");
        assert_eq!(r.unwrap_err().0, ErrorClass::MalformedStream);
    }

    #[test]
    fn truncated_stream_is_malformed() {
        let (st, r) =
            run(b"data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: {\"choi");
        assert_eq!(st.token_us.len(), 1);
        let (class, msg) = r.unwrap_err();
        assert_eq!(class, ErrorClass::MalformedStream);
        assert!(msg.contains("truncated"), "{msg}");
    }

    #[test]
    fn error_events() {
        let (_, r) = run(b"data: {\"error\":{\"message\":\"KV cache full\",\"type\":\"server_error\",\"code\":503}}\n\n");
        assert_eq!(
            r,
            Err((ErrorClass::ServerErrorEvent, "KV cache full".into()))
        );
        let (_, r) = run(b"event: error\ndata: boom\n\n");
        assert_eq!(r, Err((ErrorClass::ServerErrorEvent, "boom".into())));
        let (_, r) = run(b"data: not json\n\n");
        assert_eq!(r.unwrap_err().0, ErrorClass::MalformedStream);
    }

    #[test]
    fn every_split_of_a_stream_gives_the_same_tokens() {
        for i in 0..=CHAT.len() {
            let mut st = StreamState::default();
            st.feed(&CHAT[..i], 1).unwrap();
            st.feed(&CHAT[i..], 2).unwrap();
            st.finish().unwrap();
            assert_eq!(st.token_us.len(), 2, "split {i}");
            assert_eq!(st.usage_output, Some(3));
        }
    }

    /// Every chunk shape reads the same through the in-place parse and through a `Value`
    /// (the path for unusual chunks): tokens, finish reason and usage.
    #[test]
    fn typed_and_value_paths_agree() {
        let chunks = [
            r#"{"choices":[{"delta":{"content":"a"}}]}"#,
            r#"{"choices":[{"delta":{"content":null,"reasoning_content":"think"}}]}"#,
            r#"{"choices":[{"delta":{"content":""},"finish_reason":null}]}"#,
            r#"{"choices":[{"text":"b","finish_reason":"stop"}]}"#,
            r#"{"choices":[{"delta":{"content":"c\u00e9\"q"}}],"usage":null}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2}}"#,
            r#"{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{}}]}"#,
        ];
        for c in chunks {
            let typed: Chunk<'_> = serde_json::from_str(c).expect(c);
            let mut a = StreamState::default();
            a.apply(typed.summary(), Some(1));
            let mut b = StreamState::default();
            b.absorb(&serde_json::from_str(c).unwrap(), Some(1));
            assert_eq!(
                (a.token_us, a.finish_reason, a.usage_output, a.usage_input),
                (b.token_us, b.finish_reason, b.usage_output, b.usage_input),
                "{c}"
            );
        }
        // Unusual types fall back to the `Value` path instead of failing the stream.
        let (st, r) = run(
            b"data: {\"choices\":[{\"text\":5,\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
        );
        assert_eq!(r, Ok(()));
        assert_eq!(st.finish_reason.as_deref(), Some("stop"));
    }
}

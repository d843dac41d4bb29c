//! One answer read as it arrives (SSE pieces, or a whole JSON answer): token times, usage,
//! `finish_reason`, the kept text and the tool calls, copied into the request's record.

use serde_json::Value;

use super::chunk::{Chunk, Summary, ToolCallPiece, token_entropy};
use crate::loadgen::client::sse::{SseParser, Tail};
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

/// Longest tool-call arguments kept, bytes.
const MAX_TOOL_ARGUMENTS: usize = 64 << 10;
/// Most tool calls one answer may make.
const MAX_TOOL_CALLS: usize = 64;

/// A stream that failed.
pub type StreamError = (ErrorClass, String);

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
    pub(super) fn absorb(&mut self, v: &Value, now_us: Option<u64>) {
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

    pub(super) fn apply(&mut self, s: Summary<'_>, now_us: Option<u64>) {
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

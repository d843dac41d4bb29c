//! `OpenAI` response bodies: whole responses, SSE chunks (role, tokens, finish, usage, `[DONE]`)
//! and the logprobs shapes of both endpoints.

use serde_json::{Value, json};

use super::{openai::ApiError, sampler::Sampled, tools::ToolCall};

/// Which endpoint a response is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `/v1/chat/completions`.
    Chat,
    /// `/v1/completions`.
    Completion,
}

/// Everything needed to format one request's responses.
#[derive(Debug, Clone)]
pub struct Format {
    /// Endpoint.
    pub kind: Kind,
    /// Response id.
    pub id: String,
    /// Unix seconds.
    pub created: u64,
    /// Model name.
    pub model: String,
    /// Alternatives per token; None = no logprobs.
    pub logprobs: Option<u32>,
    /// Streaming: send a usage chunk at the end.
    pub include_usage: bool,
    /// A chat answer that is this tool call rather than text (its tokens are the call's).
    pub tool: Option<ToolCall>,
}

fn usage(prompt: usize, completion: usize) -> Value {
    json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
}

impl Format {
    fn object(&self, chunk: bool) -> &'static str {
        match (self.kind, chunk) {
            (Kind::Chat, true) => "chat.completion.chunk",
            (Kind::Chat, false) => "chat.completion",
            (Kind::Completion, _) => "text_completion",
        }
    }

    fn chat_logprobs(&self, tokens: &[Sampled]) -> Value {
        let Some(k) = self.logprobs else {
            return Value::Null;
        };
        let entry = |t: &str, lp: f64| json!({"token": t, "logprob": lp, "bytes": t.as_bytes()});
        let content: Vec<Value> = tokens
            .iter()
            .map(|s| {
                let mut e = entry(&s.text, s.logprob);
                e["top_logprobs"] = s
                    .top
                    .iter()
                    .take(k as usize)
                    .map(|(t, lp)| entry(t, *lp))
                    .collect();
                e
            })
            .collect();
        json!({ "content": content })
    }

    fn completion_logprobs(&self, tokens: &[Sampled], offset: usize) -> Value {
        let Some(k) = self.logprobs else {
            return Value::Null;
        };
        let mut off = offset;
        let offsets: Vec<usize> = tokens
            .iter()
            .map(|t| {
                let o = off;
                off += t.text.len();
                o
            })
            .collect();
        json!({
            "tokens": tokens.iter().map(|t| t.text.clone()).collect::<Vec<_>>(),
            "token_logprobs": tokens.iter().map(|t| t.logprob).collect::<Vec<_>>(),
            "top_logprobs": tokens.iter().map(|t| t.top.iter().take(k as usize)
                .map(|(w, lp)| (w.clone(), json!(lp))).collect::<serde_json::Map<_, _>>()).collect::<Vec<_>>(),
            "text_offset": offsets,
        })
    }

    fn envelope(&self, chunk: bool, choices: Value) -> Value {
        let mut v = json!({
            "id": self.id, "object": self.object(chunk), "created": self.created,
            "model": self.model,
        });
        v["choices"] = choices;
        if chunk && self.include_usage {
            v["usage"] = Value::Null;
        }
        v
    }

    /// The whole non-streaming response.
    #[must_use]
    pub fn full(&self, tokens: &[Sampled], finish: &str, prompt: usize) -> Value {
        let text: String = tokens.iter().map(|t| t.text.as_str()).collect();
        let choice = match (self.kind, &self.tool) {
            (Kind::Chat, Some(call)) => json!({
                "index": 0, "message": call.message(tokens.len()),
                "logprobs": null, "finish_reason": call.finish(tokens.len()),
            }),
            (Kind::Chat, None) => json!({
                "index": 0, "message": {"role": "assistant", "content": text},
                "logprobs": self.chat_logprobs(tokens), "finish_reason": finish,
            }),
            (Kind::Completion, _) => json!({
                "index": 0, "text": text, "logprobs": self.completion_logprobs(tokens, 0),
                "finish_reason": finish,
            }),
        };
        let mut v = self.envelope(false, json!([choice]));
        v["usage"] = usage(prompt, tokens.len());
        v
    }

    /// The SSE event of the role announcement that opens a chat stream (none for completions).
    #[must_use]
    pub fn sse_start(&self) -> Option<String> {
        (self.kind == Kind::Chat).then(|| {
            sse(&self.envelope(true, json!([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null}])))
        })
    }

    /// Appends the SSE event of one token to `out`; `offset` is the text length sent so far,
    /// `index` the tokens sent so far (a tool call's deltas are by token).
    pub fn sse_token(&self, out: &mut String, token: &Sampled, offset: usize, index: usize) {
        if let Some(call) = &self.tool {
            let choice = json!({"index": 0, "delta": call.delta(index), "logprobs": null, "finish_reason": null});
            out.push_str(&sse(&self.envelope(true, json!([choice]))));
            return;
        }
        if self.logprobs.is_none() {
            self.sse_token_fast(out, token);
            return;
        }
        let one = std::slice::from_ref(token);
        let choice = match self.kind {
            Kind::Chat => {
                json!({"index": 0, "delta": {"content": token.text}, "logprobs": self.chat_logprobs(one), "finish_reason": null})
            }
            Kind::Completion => {
                json!({"index": 0, "text": token.text, "logprobs": self.completion_logprobs(one, offset), "finish_reason": null})
            }
        };
        out.push_str(&sse(&self.envelope(true, json!([choice]))));
    }

    // The hot path of streaming (no logprobs): the same JSON as `sse_token` builds, appended
    // piece by piece to the frame buffer: no `serde_json::Value` tree, no temporary strings.
    fn sse_token_fast(&self, out: &mut String, token: &Sampled) {
        use std::fmt::Write as _;
        out.push_str("data: {\"id\":");
        json_str(out, &self.id);
        let _ = write!(
            out,
            ",\"object\":\"{}\",\"created\":{},\"model\":",
            self.object(true),
            self.created
        );
        json_str(out, &self.model);
        out.push_str(match self.kind {
            Kind::Chat => ",\"choices\":[{\"index\":0,\"delta\":{\"content\":",
            Kind::Completion => ",\"choices\":[{\"index\":0,\"text\":",
        });
        json_str(out, &token.text);
        if self.kind == Kind::Chat {
            out.push('}');
        }
        out.push_str(",\"logprobs\":null,\"finish_reason\":null}]");
        if self.include_usage {
            out.push_str(",\"usage\":null");
        }
        out.push_str("}\n\n");
    }

    /// The closing SSE events: finish reason, optional usage chunk, `[DONE]`.
    #[must_use]
    pub fn sse_end(&self, finish: &str, prompt: usize, completion: usize) -> String {
        let finish = self.tool.as_ref().map_or(finish, |c| c.finish(completion));
        let choice = match self.kind {
            Kind::Chat => {
                json!({"index": 0, "delta": {}, "logprobs": null, "finish_reason": finish})
            }
            Kind::Completion => {
                json!({"index": 0, "text": "", "logprobs": null, "finish_reason": finish})
            }
        };
        let mut s = sse(&self.envelope(true, json!([choice])));
        if self.include_usage {
            let mut u = self.envelope(true, json!([]));
            u["usage"] = usage(prompt, completion);
            s.push_str(&sse(&u));
        }
        s.push_str("data: [DONE]\n\n");
        s
    }

    /// An error inside an open stream (status is already 200), then `[DONE]`.
    #[must_use]
    pub fn sse_error(err: &ApiError) -> String {
        format!("{}data: [DONE]\n\n", sse(&err.body()))
    }
}

fn sse(v: &Value) -> String {
    format!("data: {v}\n\n")
}

/// Appends `s` as a JSON string literal (quotes, escapes) to `out`.
fn json_str(out: &mut String, s: &str) {
    use std::fmt::Write as _;
    out.push('"');
    let mut rest = s;
    while let Some(i) = rest.find(|c: char| c == '"' || c == '\\' || c < ' ') {
        out.push_str(&rest[..i]);
        let c = rest[i..].chars().next().unwrap_or(' ');
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
        }
        rest = &rest[i + c.len_utf8()..];
    }
    out.push_str(rest);
    out.push('"');
}

/// Standard base64 (RFC 4648, with padding).
#[must_use]
pub fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(i.as_bytes()), o);
        }
    }

    #[test]
    fn fast_token_chunks_equal_the_generic_ones() {
        let tok = Sampled {
            text: " a\"b\\c\n\u{1}é".to_owned(),
            logprob: -0.5,
            top: vec![(" a\"b".to_owned(), -0.5)],
        };
        for kind in [Kind::Chat, Kind::Completion] {
            for include_usage in [false, true] {
                let f = Format {
                    kind,
                    id: "x-1".to_owned(),
                    created: 7,
                    model: "m\"1".to_owned(),
                    logprobs: None,
                    include_usage,
                    tool: None,
                };
                let mut fast = String::new();
                f.sse_token_fast(&mut fast, &tok);
                let one = std::slice::from_ref(&tok);
                let choice = match kind {
                    Kind::Chat => {
                        json!({"index": 0, "delta": {"content": tok.text}, "logprobs": f.chat_logprobs(one), "finish_reason": null})
                    }
                    Kind::Completion => {
                        json!({"index": 0, "text": tok.text, "logprobs": f.completion_logprobs(one, 0), "finish_reason": null})
                    }
                };
                let slow = f.envelope(true, json!([choice]));
                let parsed: Value =
                    serde_json::from_str(fast.strip_prefix("data: ").unwrap().trim_end()).unwrap();
                assert_eq!(parsed, slow);
                assert!(fast.ends_with("\n\n"));
            }
        }
    }
}

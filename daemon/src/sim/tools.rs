//! Tool calls in chat answers. A chat request that offers function `tools`, and whose last
//! message is not a tool result, is answered with a call instead of text for a
//! `tools.call_rate` share of requests. The draw is a hash of the request's messages and the
//! sim's `tools.seed`, so the same request always gets the same kind of answer ([`draw`]).
//!
//! The call's arguments are `{"query": <the start of the last user message>}`. The engine
//! generates one token per tokenizer piece of them, so a call costs engine time like text
//! does; streamed, the first token carries the call's id and function name with the first
//! piece of the arguments, each later token one more piece.
//!
//! `POST /v1/tools/{name}` answers a call's arguments: a tool endpoint for client-orchestrated
//! pipelines (`request.pipeline`'s `tools` step), counted in
//! `inferscope_sim_tool_results_total`.

use serde_json::{Value, json};

use super::{
    config::ToolConfig,
    openai::{ApiError, Content, Message, Tool},
    sampler::Rng,
    tokenizer::{self, fnv1a},
};

/// Most tokenizer pieces of the user's message copied into the call's `query`.
const QUERY_PIECES: usize = 24;

/// A tool call an answer carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// `call_...`, set once the request has its id.
    pub id: String,
    /// The function called.
    pub name: String,
    /// Its arguments, a JSON object as text.
    pub arguments: String,
    /// `arguments` cut at the tokenizer's pieces: one per generated token.
    pieces: Vec<String>,
}

impl ToolCall {
    /// A call of `name` with `arguments`.
    #[must_use]
    pub fn new(name: &str, arguments: String) -> Self {
        let pieces = tokenizer::pieces(&arguments)
            .into_iter()
            .map(str::to_owned)
            .collect();
        Self {
            id: String::new(),
            name: name.to_owned(),
            arguments,
            pieces,
        }
    }

    /// Tokens the whole call takes.
    #[must_use]
    pub fn tokens(&self) -> usize {
        self.pieces.len()
    }

    /// `finish_reason` after `sent` tokens: `tool_calls` when the arguments are complete, else
    /// `length` (`max_tokens` cut them).
    #[must_use]
    pub fn finish(&self, sent: usize) -> &'static str {
        if sent >= self.pieces.len() {
            "tool_calls"
        } else {
            "length"
        }
    }

    /// The assistant message of a whole answer after `tokens` tokens.
    #[must_use]
    pub fn message(&self, tokens: usize) -> Value {
        let arguments: String = self
            .pieces
            .iter()
            .take(tokens)
            .map(String::as_str)
            .collect();
        json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": self.id, "type": "function",
            "function": {"name": self.name, "arguments": arguments},
        }]})
    }

    /// The streamed `delta` of token `index` (0-based).
    #[must_use]
    pub fn delta(&self, index: usize) -> Value {
        let piece = self.pieces.get(index).map_or("", String::as_str);
        let call = if index == 0 {
            json!({"index": 0, "id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": piece}})
        } else {
            json!({"index": 0, "function": {"arguments": piece}})
        };
        json!({"tool_calls": [call]})
    }
}

/// `POST /v1/tools/{name}`: the arguments (a JSON object) answered with a result made from
/// them: `{"tool": name, "result": "..."}`, deterministic. A body that is not a JSON object
/// is a 400.
pub(crate) async fn answer(
    axum::extract::State(s): super::state::St,
    axum::extract::Path(name): axum::extract::Path<String>,
    body: axum::body::Bytes,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let args: serde_json::Map<String, Value> = match super::openai::parse(&body) {
        Ok(a) => a,
        Err(e) => return e.into_response(),
    };
    s.counters
        .tool_results
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let query = args
        .get("query")
        .and_then(Value::as_str)
        .unwrap_or_default();
    axum::Json(json!({"tool": name, "result": format!("{name} found 3 notes about {query:?}")}))
        .into_response()
}

/// What `tool_choice` asks for.
enum Choice {
    None,
    Auto,
    Required,
    Named(String),
}

fn choice(v: Option<&Value>) -> Result<Choice, ApiError> {
    let bad = || {
        ApiError::bad_request(
            "tool_choice must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}",
            Some("tool_choice"),
        )
    };
    match v {
        None | Some(Value::Null) => Ok(Choice::Auto),
        Some(Value::String(s)) => match s.as_str() {
            "none" => Ok(Choice::None),
            "auto" => Ok(Choice::Auto),
            "required" => Ok(Choice::Required),
            _ => Err(bad()),
        },
        Some(v) => v["function"]["name"]
            .as_str()
            .map(|n| Choice::Named(n.to_owned()))
            .ok_or_else(bad),
    }
}

fn message_text(m: &Message) -> String {
    m.content.as_ref().map(Content::text).unwrap_or_default()
}

/// The request's draw in `[0, 1)`: it gets a tool call when the draw is below
/// `tools.call_rate`. A hash of every message's role and text with `seed`.
#[must_use]
pub fn draw(seed: u64, messages: &[Message]) -> f64 {
    Rng::new(hash(seed, messages)).next_f64()
}

fn hash(seed: u64, messages: &[Message]) -> u64 {
    let mut bytes = seed.to_le_bytes().to_vec();
    for m in messages {
        bytes.extend(m.role.as_bytes());
        bytes.push(0xff);
        bytes.extend(message_text(m).as_bytes());
        bytes.push(0xfe);
    }
    fnv1a(&bytes)
}

/// `{"query": ...}`: the first pieces of the last user message.
fn arguments(messages: &[Message]) -> String {
    let text = messages
        .iter()
        .rev()
        .find(|m| m.role == "user")
        .map(message_text)
        .unwrap_or_default();
    let query: String = tokenizer::pieces(&text)
        .into_iter()
        .take(QUERY_PIECES)
        .collect();
    json!({"query": query.trim()}).to_string()
}

/// The call a chat request is answered with, or `None` for a text answer: none without
/// function tools, after a tool result, with `tool_choice: "none"`, or when the request's
/// [`draw`] is not below `call_rate` (`tool_choice: "auto"` or absent). `required` always
/// calls; a named function is called whatever the draw. The function is the named one or one
/// of the offered ones, picked by the hash.
pub fn plan(
    cfg: &ToolConfig,
    tools: &[Tool],
    tool_choice: Option<&Value>,
    messages: &[Message],
) -> Result<Option<ToolCall>, ApiError> {
    let names: Vec<&str> = tools
        .iter()
        .filter(|t| t.kind == "function")
        .filter_map(|t| t.function.as_ref().map(|f| f.name.as_str()))
        .filter(|n| !n.is_empty())
        .collect();
    let choice = choice(tool_choice)?;
    if names.is_empty() || messages.last().is_some_and(|m| m.role == "tool") {
        return Ok(None);
    }
    let mut rng = Rng::new(hash(cfg.seed, messages));
    // The first number is `draw`'s.
    let drawn = rng.next_f64() < cfg.call_rate;
    let name = match choice {
        Choice::None => return Ok(None),
        Choice::Auto if !drawn => return Ok(None),
        Choice::Auto | Choice::Required => {
            names[(rng.next_u64() % names.len() as u64) as usize].to_owned()
        }
        Choice::Named(n) if names.contains(&n.as_str()) => n,
        Choice::Named(n) => {
            return Err(ApiError::bad_request(
                format!("tool_choice names the function {n:?}, which is not among the tools"),
                Some("tool_choice"),
            ));
        }
    };
    Ok(Some(ToolCall::new(&name, arguments(messages))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msgs(v: Value) -> Vec<Message> {
        serde_json::from_value(v).unwrap()
    }

    fn tools(names: &[&str]) -> Vec<Tool> {
        let v: Vec<Value> = names
            .iter()
            .map(|n| json!({"type": "function", "function": {"name": n, "parameters": {}}}))
            .collect();
        serde_json::from_value(Value::Array(v)).unwrap()
    }

    #[test]
    fn the_rate_decides_by_the_draw() {
        let cfg = ToolConfig {
            call_rate: 0.5,
            seed: 3,
        };
        let t = tools(&["search"]);
        let mut calls = 0;
        for i in 0..400 {
            let m = msgs(json!([{"role": "user", "content": format!("question {i}")}]));
            let p = plan(&cfg, &t, None, &m).unwrap();
            assert_eq!(p.is_some(), draw(cfg.seed, &m) < cfg.call_rate);
            assert_eq!(p, plan(&cfg, &t, None, &m).unwrap(), "deterministic");
            calls += usize::from(p.is_some());
        }
        assert!((150..250).contains(&calls), "{calls}");
    }

    #[test]
    fn no_call_without_tools_after_a_result_or_with_none() {
        let cfg = ToolConfig::default();
        let m = msgs(json!([{"role": "user", "content": "hi"}]));
        assert_eq!(plan(&cfg, &[], None, &m).unwrap(), None);
        assert!(plan(&cfg, &tools(&["f"]), None, &m).unwrap().is_some());
        let none = json!("none");
        assert_eq!(plan(&cfg, &tools(&["f"]), Some(&none), &m).unwrap(), None);
        let after = msgs(json!([{"role": "user", "content": "hi"},
            {"role": "assistant", "content": null, "tool_calls": []},
            {"role": "tool", "tool_call_id": "call_1", "content": "42"}]));
        assert_eq!(plan(&cfg, &tools(&["f"]), None, &after).unwrap(), None);
    }

    #[test]
    fn choice_required_and_named() {
        let cfg = ToolConfig {
            call_rate: 0.0,
            seed: 1,
        };
        let m = msgs(json!([{"role": "user", "content": "hi"}]));
        let t = tools(&["a", "b"]);
        assert!(
            plan(&cfg, &t, Some(&json!("required")), &m)
                .unwrap()
                .is_some()
        );
        let named = json!({"type": "function", "function": {"name": "b"}});
        assert_eq!(plan(&cfg, &t, Some(&named), &m).unwrap().unwrap().name, "b");
        let unknown = json!({"type": "function", "function": {"name": "c"}});
        assert!(plan(&cfg, &t, Some(&unknown), &m).is_err());
        assert!(plan(&cfg, &t, Some(&json!("sometimes")), &m).is_err());
    }

    #[test]
    fn arguments_are_json_cut_into_tokens() {
        let m = msgs(json!([{"role": "user", "content": "What is the \"KV cache\"?"}]));
        let call = plan(&ToolConfig::default(), &tools(&["search"]), None, &m)
            .unwrap()
            .unwrap();
        let args: Value = serde_json::from_str(&call.arguments).unwrap();
        assert_eq!(args, json!({"query": "What is the \"KV cache\"?"}));
        assert_eq!(call.tokens(), tokenizer::count(&call.arguments));
        let streamed: String = (0..call.tokens())
            .map(|i| {
                call.delta(i)["tool_calls"][0]["function"]["arguments"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert_eq!(streamed, call.arguments);
        assert_eq!(call.finish(call.tokens()), "tool_calls");
        assert_eq!(call.finish(1), "length");
    }
}

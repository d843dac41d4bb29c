//! `OpenAI` wire format: request parsing (with 400s that say what is wrong), response and SSE
//! chunk bodies, and the error JSON shape.

use axum::{
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde::Deserialize;
use serde_json::{Value, json};

/// An error answered to the client in `OpenAI`'s shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status}: {message}")]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Human-readable message.
    pub message: String,
    /// Offending parameter, when known.
    pub param: Option<&'static str>,
}

impl ApiError {
    /// 400 with a message.
    #[must_use]
    pub fn bad_request(message: impl Into<String>, param: Option<&'static str>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            param,
        }
    }

    /// Any status with a message.
    #[must_use]
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            param: None,
        }
    }

    /// The JSON body.
    #[must_use]
    pub fn body(&self) -> Value {
        let kind = match self.status.as_u16() {
            400 | 404 | 413 | 422 => "invalid_request_error",
            429 | 503 => "server_overloaded",
            _ => "server_error",
        };
        json!({"error": {
            "message": self.message,
            "type": kind,
            "param": self.param,
            "code": self.status.as_u16(),
        }})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body())).into_response()
    }
}

/// Message content: a string or a list of parts (`{"type":"text","text":...}`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// Content parts; only text parts count.
    Parts(Vec<Part>),
}

/// One content part.
#[derive(Debug, Clone, Deserialize)]
pub struct Part {
    /// Part type (`text`, `image_url`, ...).
    #[serde(rename = "type")]
    pub kind: String,
    /// Text of a `text` part.
    #[serde(default)]
    pub text: Option<String>,
}

impl Content {
    /// The text the tokenizer sees.
    #[must_use]
    pub fn text(&self) -> String {
        match self {
            Self::Text(s) => s.clone(),
            Self::Parts(p) => p.iter().filter_map(|p| p.text.clone()).collect(),
        }
    }
}

/// A chat message.
#[derive(Debug, Clone, Deserialize)]
pub struct Message {
    /// `system`, `user`, `assistant`, `tool`, ...
    pub role: String,
    /// Content (may be null for assistant tool calls).
    #[serde(default)]
    pub content: Option<Content>,
}

/// One entry of a chat request's `tools`; only `function` tools can be called.
#[derive(Debug, Clone, Deserialize)]
pub struct Tool {
    /// `function` (others are ignored).
    #[serde(rename = "type")]
    pub kind: String,
    /// The function of a `function` tool.
    pub function: Option<FunctionDef>,
}

/// A callable function (its `description` and `parameters` are not read).
#[derive(Debug, Clone, Deserialize)]
pub struct FunctionDef {
    /// Its name.
    pub name: String,
}

/// `stream_options`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamOptions {
    /// Send a final chunk with `usage`.
    #[serde(default)]
    pub include_usage: bool,
}

/// `POST /v1/chat/completions` body (fields the simulator uses; others are ignored).
#[derive(Debug, Clone, Deserialize)]
pub struct ChatRequest {
    /// Model name.
    pub model: String,
    /// Conversation.
    pub messages: Vec<Message>,
    /// Completion length cap.
    pub max_tokens: Option<u64>,
    /// Newer name of `max_tokens`.
    pub max_completion_tokens: Option<u64>,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Sampling seed.
    pub seed: Option<i64>,
    /// Stream as SSE.
    #[serde(default)]
    pub stream: Option<bool>,
    /// Streaming options.
    pub stream_options: Option<StreamOptions>,
    /// Return log-probabilities.
    pub logprobs: Option<bool>,
    /// Alternatives per token (0..=20).
    pub top_logprobs: Option<u32>,
    /// Choices; only 1 is supported.
    pub n: Option<u32>,
    /// Functions the model may call (see `sim::tools`).
    pub tools: Option<Vec<Tool>>,
    /// `none`, `auto`, `required` or `{"type": "function", "function": {"name": ...}}`.
    pub tool_choice: Option<Value>,
}

/// A completions prompt: text, a one-element batch, or token ids.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    /// Text.
    Text(String),
    /// Token ids.
    Tokens(Vec<u32>),
    /// A batch of texts (only one element is supported).
    Batch(Vec<String>),
}

/// `POST /v1/completions` body.
#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
    /// Model name.
    pub model: String,
    /// Prompt.
    pub prompt: Prompt,
    /// Completion length (`OpenAI`'s default is 16).
    pub max_tokens: Option<u64>,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Sampling seed.
    pub seed: Option<i64>,
    /// Stream as SSE.
    #[serde(default)]
    pub stream: Option<bool>,
    /// Streaming options.
    pub stream_options: Option<StreamOptions>,
    /// Number of alternatives per token to return (0..=5), or none.
    pub logprobs: Option<u32>,
    /// Choices; only 1 is supported.
    pub n: Option<u32>,
}

/// Embedding input: text, texts, or token ids.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum EmbeddingInput {
    /// One text.
    Text(String),
    /// Several texts.
    Texts(Vec<String>),
    /// One token-id list.
    Tokens(Vec<u32>),
}

/// `POST /v1/embeddings` body.
#[derive(Debug, Clone, Deserialize)]
pub struct EmbeddingRequest {
    /// Model name.
    pub model: String,
    /// Input.
    pub input: EmbeddingInput,
    /// `float` (default) or `base64` (little-endian f32, what the `openai` package asks for).
    pub encoding_format: Option<String>,
}

/// Parses a JSON body into `T`, turning every failure into a 400 that names the problem.
pub fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        let what = if e.is_syntax() || e.is_eof() {
            "malformed JSON"
        } else {
            "invalid request"
        };
        ApiError::bad_request(format!("{what}: {e}"), None)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_errors_are_400_and_say_why() {
        let e = parse::<ChatRequest>(b"{not json").unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert!(e.message.contains("malformed JSON"));
        let e = parse::<ChatRequest>(br#"{"model":"m","messages":[],"max_tokens":"many"}"#)
            .unwrap_err();
        assert!(e.message.contains("invalid request"), "{}", e.message);
        let e = parse::<ChatRequest>(br#"{"model":"m"}"#).unwrap_err();
        assert!(e.message.contains("messages"), "{}", e.message);
        assert!(parse::<ChatRequest>(br#"{"model":"m","messages":[],"unknown":{"x":1}}"#).is_ok());
    }
}

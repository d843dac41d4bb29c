//! One row of a dataset: its prompt, the output length it asks for, a recorded conversation's
//! turns, and its other fields for `${dataset.NAME}`.

use serde_json::{Map, Value};

/// One prompt (and whatever else its source row carried).
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The prompt text.
    pub prompt: String,
    /// Output length wanted for this prompt, when the source says (`ShareGPT` reply
    /// length, synthetic `output_tokens`); used as `max_tokens` unless the phase sets one.
    pub output_tokens: Option<u32>,
    /// A `ShareGPT` conversation's turns in order (the first is `prompt`); empty for
    /// single-prompt rows.
    pub turns: Vec<Turn>,
    pub(super) fields: Map<String, Value>,
}

/// One user message of a recorded conversation and the reply recorded after it.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    /// What the user said.
    pub user: String,
    /// What the assistant answered, when the dataset has it.
    pub reply: Option<String>,
}

impl Turn {
    /// The reply's length in whitespace words: its tokens, well enough for `max_tokens`.
    #[must_use]
    pub fn reply_tokens(&self) -> Option<u32> {
        self.reply
            .as_ref()
            .map(|r| r.split_whitespace().count().max(1) as u32)
    }
}

impl Row {
    /// A row with only a prompt.
    #[must_use]
    pub fn from_prompt(prompt: String, output_tokens: Option<u32>) -> Self {
        Row {
            prompt,
            output_tokens,
            turns: Vec::new(),
            fields: Map::new(),
        }
    }

    /// A field as JSON, keeping its type (a `temperature` column stays a number).
    #[must_use]
    pub fn value(&self, name: &str) -> Option<Value> {
        match name {
            "prompt" => Some(Value::String(self.prompt.clone())),
            "output_tokens" => self.output_tokens.map(Value::from),
            other => self.fields.get(other).cloned(),
        }
    }

    /// `${dataset.NAME}`: `prompt`, `output_tokens`, or any top-level key of the row.
    #[must_use]
    pub fn field(&self, name: &str) -> String {
        match name {
            "prompt" => self.prompt.clone(),
            "output_tokens" => self
                .output_tokens
                .map(|n| n.to_string())
                .unwrap_or_default(),
            other => match self.fields.get(other) {
                Some(Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
                None => String::new(),
            },
        }
    }
}

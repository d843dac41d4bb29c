//! Reading a dataset file: JSONL rows and `ShareGPT` conversations, each error at its line.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::row::{Row, Turn};

/// A dataset that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    /// A row is malformed.
    #[error("{path}:{line}: {what}")]
    Row {
        /// File.
        path: PathBuf,
        /// 1-based line (JSONL) or entry index (`ShareGPT`).
        line: usize,
        /// What is wrong.
        what: String,
    },
    /// Neither or both of `path` and `synthetic`, or no rows.
    #[error("{0}")]
    Spec(String),
}

pub(super) fn parse_jsonl(
    text: &str,
    path: &Path,
    field: Option<&str>,
) -> Result<Vec<Row>, DatasetError> {
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let err = |what: String| DatasetError::Row {
            path: path.to_path_buf(),
            line: i + 1,
            what,
        };
        if line.trim().is_empty() {
            continue;
        }
        let v: Map<String, Value> =
            serde_json::from_str(line).map_err(|e| err(format!("not a JSON object: {e}")))?;
        let key = field.unwrap_or(if v.contains_key("prompt") {
            "prompt"
        } else {
            "text"
        });
        let prompt = v
            .get(key)
            .and_then(Value::as_str)
            .ok_or_else(|| {
                err(format!(
                    "no string field `{key}` (set `field:` to the prompt's key)"
                ))
            })?
            .to_string();
        let output_tokens = v
            .get("output_tokens")
            .and_then(Value::as_u64)
            .map(|n| n as u32);
        rows.push(Row {
            prompt,
            output_tokens,
            turns: Vec::new(),
            fields: v,
        });
    }
    Ok(rows)
}

pub(super) fn parse_sharegpt(text: &str, path: &Path) -> Result<Vec<Row>, DatasetError> {
    let all: Vec<Value> = serde_json::from_str(text).map_err(|e| DatasetError::Row {
        path: path.to_path_buf(),
        line: e.line(),
        what: format!("not a ShareGPT JSON array: {e}"),
    })?;
    let mut rows = Vec::new();
    for conv in &all {
        let Some(turns) = conv.get("conversations").and_then(Value::as_array) else {
            continue;
        };
        // Each user message, and the assistant message after it (the next one before the
        // next user message), in order.
        let mut parsed: Vec<Turn> = Vec::new();
        for t in turns {
            let who = t
                .get("from")
                .or_else(|| t.get("role"))
                .and_then(Value::as_str);
            let Some(text) = t
                .get("value")
                .or_else(|| t.get("content"))
                .and_then(Value::as_str)
            else {
                continue;
            };
            match who {
                Some("human" | "user") => parsed.push(Turn {
                    user: text.to_string(),
                    reply: None,
                }),
                Some("gpt" | "assistant") => {
                    if let Some(last) = parsed.last_mut().filter(|l| l.reply.is_none()) {
                        last.reply = Some(text.to_string());
                    }
                }
                _ => {}
            }
        }
        if let Some(first) = parsed.first() {
            let mut row = Row::from_prompt(first.user.clone(), first.reply_tokens());
            row.turns = parsed;
            rows.push(row);
        }
    }
    Ok(rows)
}

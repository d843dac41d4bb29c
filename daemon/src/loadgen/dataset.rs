//! Prompt datasets: JSONL files, ShareGPT-style JSON, or synthetic token lengths.

use std::path::{Path, PathBuf};

use rand::Rng;
use rand_distr::{Distribution, Normal};
use serde::Deserialize;
use serde_json::{Map, Value};

/// One prompt (and whatever else its source row carried).
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The prompt text.
    pub prompt: String,
    /// Output length wanted for this prompt, when the source says (`ShareGPT` reply
    /// length, synthetic `output_tokens`); used as `max_tokens` unless the phase sets one.
    pub output_tokens: Option<u32>,
    fields: Map<String, Value>,
}

impl Row {
    /// A row with only a prompt.
    #[must_use]
    pub fn from_prompt(prompt: String, output_tokens: Option<u32>) -> Self {
        Row {
            prompt,
            output_tokens,
            fields: Map::new(),
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

/// Where a dataset comes from (the `datasets:` map of a scenario).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DatasetSpec {
    /// JSONL (one object per line) or `ShareGPT` JSON; relative to the scenario file.
    pub path: Option<PathBuf>,
    /// `jsonl` or `sharegpt`; default: `sharegpt` for `.json`, `jsonl` otherwise.
    pub format: Option<Format>,
    /// JSONL key that holds the prompt (default `prompt`, then `text`).
    pub field: Option<String>,
    /// Generate prompts instead of reading a file.
    pub synthetic: Option<Synthetic>,
}

/// File formats.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// One JSON object per line.
    Jsonl,
    /// `[{"conversations": [{"from": "human", "value": ..}, {"from": "gpt", ..}]}]`.
    Sharegpt,
}

/// Synthetic prompts with lengths drawn from normal distributions (clamped to >= 1).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Synthetic {
    /// Prompt length in tokens (one word of the built-in vocabulary is about one token).
    pub input_tokens: Length,
    /// Output length in tokens, sent as `max_tokens`.
    pub output_tokens: Length,
    /// Number of distinct prompts (default 1000).
    #[serde(default = "default_count")]
    pub count: usize,
}

fn default_count() -> usize {
    1000
}

/// A length distribution.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Length {
    /// Mean.
    pub mean: f64,
    /// Standard deviation (default 0: fixed length).
    #[serde(default)]
    pub stddev: f64,
}

impl Length {
    fn draw<R: Rng>(self, rng: &mut R) -> u32 {
        let v = Normal::new(self.mean, self.stddev.max(0.0)).map_or(self.mean, |n| n.sample(rng));
        v.round().clamp(1.0, 1e7) as u32
    }
}

/// A dataset that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    /// The file could not be read.
    #[error("cannot read dataset {path}: {source}")]
    Io {
        /// File.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
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

/// Loaded prompts.
#[derive(Debug, Clone)]
pub struct Dataset {
    rows: Vec<Row>,
}

const VOCAB: &[&str] = &[
    "the",
    "model",
    "token",
    "cache",
    "request",
    "latency",
    "queue",
    "batch",
    "prompt",
    "vector",
    "search",
    "index",
    "memory",
    "kernel",
    "thread",
    "server",
    "answer",
    "question",
    "explain",
    "summarise",
    "system",
    "network",
    "graph",
    "data",
    "time",
    "load",
    "stream",
    "value",
    "error",
    "result",
    "compute",
    "layer",
];

impl Dataset {
    /// Loads or generates the rows; `base` is the scenario file's folder.
    pub fn load<R: Rng>(
        spec: &DatasetSpec,
        base: &Path,
        rng: &mut R,
    ) -> Result<Self, DatasetError> {
        let rows = match (&spec.path, &spec.synthetic) {
            (Some(p), None) => {
                let path = base.join(p);
                let text = std::fs::read_to_string(&path).map_err(|source| DatasetError::Io {
                    path: path.clone(),
                    source,
                })?;
                let format =
                    spec.format
                        .unwrap_or(if path.extension().is_some_and(|e| e == "json") {
                            Format::Sharegpt
                        } else {
                            Format::Jsonl
                        });
                match format {
                    Format::Jsonl => parse_jsonl(&text, &path, spec.field.as_deref())?,
                    Format::Sharegpt => parse_sharegpt(&text, &path)?,
                }
            }
            (None, Some(s)) => (0..s.count.max(1))
                .map(|_| {
                    let n = s.input_tokens.draw(rng);
                    let words: Vec<&str> = (0..n)
                        .map(|_| VOCAB[rng.random_range(0..VOCAB.len())])
                        .collect();
                    Row::from_prompt(words.join(" "), Some(s.output_tokens.draw(rng)))
                })
                .collect(),
            _ => {
                return Err(DatasetError::Spec(
                    "a dataset needs exactly one of `path` or `synthetic`".into(),
                ));
            }
        };
        if rows.is_empty() {
            return Err(DatasetError::Spec("dataset has no prompts".into()));
        }
        Ok(Dataset { rows })
    }

    /// A dataset of given rows.
    #[must_use]
    pub fn from_rows(rows: Vec<Row>) -> Self {
        Dataset { rows }
    }

    /// Number of rows.
    #[must_use]
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether there are no rows (never true for a loaded dataset).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// A row drawn uniformly.
    pub fn pick<R: Rng>(&self, rng: &mut R) -> &Row {
        &self.rows[rng.random_range(0..self.rows.len())]
    }
}

fn parse_jsonl(text: &str, path: &Path, field: Option<&str>) -> Result<Vec<Row>, DatasetError> {
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
            fields: v,
        });
    }
    Ok(rows)
}

fn parse_sharegpt(text: &str, path: &Path) -> Result<Vec<Row>, DatasetError> {
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
        let text_of = |from: &[&str]| {
            turns.iter().find_map(|t| {
                let who = t
                    .get("from")
                    .or_else(|| t.get("role"))
                    .and_then(Value::as_str)?;
                from.contains(&who)
                    .then(|| t.get("value").or_else(|| t.get("content"))?.as_str())?
            })
        };
        if let Some(prompt) = text_of(&["human", "user"]) {
            // Reply length in whitespace words approximates its tokens well enough for max_tokens.
            let output_tokens =
                text_of(&["gpt", "assistant"]).map(|r| r.split_whitespace().count().max(1) as u32);
            rows.push(Row::from_prompt(prompt.to_string(), output_tokens));
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{SeedableRng, rngs::SmallRng};

    #[test]
    fn jsonl_sharegpt_and_synthetic() {
        let dir = std::env::temp_dir().join(format!("lg-ds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("a.jsonl"),
            "{\"prompt\":\"hi\",\"lang\":\"en\"}\n\n{\"prompt\":\"yo\"}\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("b.json"),
            r#"[{"conversations":[{"from":"human","value":"q1"},{"from":"gpt","value":"a b c"}]},{"x":1}]"#,
        )
        .unwrap();
        std::fs::write(dir.join("bad.jsonl"), "{\"prompt\":\"ok\"}\n{\"text\":3}\n").unwrap();
        let mut rng = SmallRng::seed_from_u64(3);
        let spec = |p: &str| DatasetSpec {
            path: Some(p.into()),
            format: None,
            field: None,
            synthetic: None,
        };
        let a = Dataset::load(&spec("a.jsonl"), &dir, &mut rng).unwrap();
        assert_eq!(a.len(), 2);
        assert_eq!(a.rows[0].field("lang"), "en");
        let b = Dataset::load(&spec("b.json"), &dir, &mut rng).unwrap();
        assert_eq!(b.rows, vec![Row::from_prompt("q1".into(), Some(3))]);
        let e = Dataset::load(&spec("bad.jsonl"), &dir, &mut rng)
            .unwrap_err()
            .to_string();
        assert!(
            e.ends_with("bad.jsonl:2: no string field `text` (set `field:` to the prompt's key)"),
            "{e}"
        );
        let syn = DatasetSpec {
            path: None,
            format: None,
            field: None,
            synthetic: Some(Synthetic {
                input_tokens: Length {
                    mean: 50.0,
                    stddev: 0.0,
                },
                output_tokens: Length {
                    mean: 20.0,
                    stddev: 5.0,
                },
                count: 10,
            }),
        };
        let s = Dataset::load(&syn, &dir, &mut rng).unwrap();
        assert_eq!(s.len(), 10);
        assert!(
            s.rows
                .iter()
                .all(|r| r.prompt.split(' ').count() == 50 && r.output_tokens.unwrap() >= 1)
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

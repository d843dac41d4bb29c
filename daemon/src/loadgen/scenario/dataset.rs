//! Prompt datasets: JSONL files, ShareGPT-style JSON, or synthetic token lengths (with shared
//! prefixes: `shared_prefix.rs`).

use std::path::{Path, PathBuf};

use rand::Rng;
use rand_distr::{Distribution, Normal};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::loadgen::scenario::{
    files::Files,
    shared_prefix::{SharedPrefixSpec, SharedPrefixes},
    words::{self, MAX_SYNTHETIC_PROMPT_WORDS, MAX_SYNTHETIC_WORDS},
};

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
    fields: Map<String, Value>,
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
    /// The prompts themselves, inline (what a scenario posted to the control API uses when
    /// the daemon has no `--data-dir`).
    pub prompts: Option<Vec<String>>,
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
    /// Prompt length in tokens (one word of the built-in vocabulary is about one token); with
    /// `shared_prefix`, the length of the suffix after the prefix.
    pub input_tokens: Length,
    /// Output length in tokens, sent as `max_tokens`.
    pub output_tokens: Length,
    /// Number of distinct prompts (default [`DEFAULT_SYNTHETIC_COUNT`]); not with
    /// `shared_prefix`, whose every request is a prompt of its own.
    pub count: Option<usize>,
    /// Distinct prefixes shared by given shares of the requests, each before a suffix of the
    /// request's own (see `shared_prefix.rs`).
    pub shared_prefix: Option<SharedPrefixSpec>,
}

/// Distinct synthetic prompts when `count` is not given.
pub const DEFAULT_SYNTHETIC_COUNT: usize = 1000;

/// Longest prompt of a dataset, bytes (a file's rows, inline or synthetic prompts).
pub const MAX_PROMPT_BYTES: usize = 1 << 20;
/// Most distinct synthetic prompts.
pub const MAX_SYNTHETIC_COUNT: usize = 1_000_000;

impl Synthetic {
    /// The size checks: each prompt and all of them together stay within memory caps.
    fn check(&self) -> Result<(), String> {
        let finite = |l: Length| l.mean.is_finite() && l.stddev.is_finite() && l.stddev >= 0.0;
        if !finite(self.input_tokens) || !finite(self.output_tokens) {
            return Err("synthetic lengths need finite `mean` and `stddev` >= 0".into());
        }
        if self.shared_prefix.is_some() && self.count.is_some() {
            return Err(
                "synthetic `count` does not go with `shared_prefix`: each request draws a suffix of its own, drop `count`"
                    .into(),
            );
        }
        let count = self.count();
        if count > MAX_SYNTHETIC_COUNT {
            return Err(format!(
                "synthetic `count` {count} is above {MAX_SYNTHETIC_COUNT}: fewer distinct prompts repeat just as well"
            ));
        }
        if self.input_tokens.mean > MAX_SYNTHETIC_PROMPT_WORDS {
            return Err(format!(
                "synthetic `input_tokens.mean` {} is above {MAX_SYNTHETIC_PROMPT_WORDS}",
                self.input_tokens.mean
            ));
        }
        if let Some(p) = &self.shared_prefix
            && f64::from(p.tokens) + self.input_tokens.mean > MAX_SYNTHETIC_PROMPT_WORDS
        {
            return Err(format!(
                "`shared_prefix.tokens` + `input_tokens.mean` is above {MAX_SYNTHETIC_PROMPT_WORDS} words: shorten the prefix or the suffix"
            ));
        }
        let words = count.max(1) as f64
            * (self.input_tokens.mean + 3.0 * self.input_tokens.stddev).max(1.0);
        if self.shared_prefix.is_none() && words > MAX_SYNTHETIC_WORDS {
            return Err(format!(
                "synthetic `count` x `input_tokens` (mean + 3 stddev) is {words:.0} words, above {MAX_SYNTHETIC_WORDS:.0}: lower `count`"
            ));
        }
        Ok(())
    }

    /// Distinct prompts to make (without `shared_prefix`).
    fn count(&self) -> usize {
        self.count.unwrap_or(DEFAULT_SYNTHETIC_COUNT)
    }
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

    /// A prompt length: as [`Length::draw`], at most [`MAX_SYNTHETIC_PROMPT_WORDS`].
    fn draw_prompt<R: Rng>(self, rng: &mut R) -> u32 {
        self.draw(rng).min(MAX_SYNTHETIC_PROMPT_WORDS as u32)
    }
}

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

/// Loaded prompts.
#[derive(Debug, Clone)]
pub struct Dataset {
    rows: Vec<Row>,
    /// A shared-prefix synthetic dataset makes a row per request instead of storing rows.
    made: Option<Made>,
}

/// What a shared-prefix synthetic dataset makes each row of.
#[derive(Debug, Clone)]
struct Made {
    prefixes: SharedPrefixes,
    suffix: Length,
    output: Length,
}

impl Made {
    /// A row: a prefix drawn by the shares (or none), then a suffix of its own.
    fn row<R: Rng>(&self, rng: &mut R) -> Row {
        let prefix = self.prefixes.draw(rng);
        let n = self.suffix.draw_prompt(rng);
        let suffix = words::random(rng, n);
        let prompt = match prefix {
            Some(p) => format!("{p} {suffix}"),
            None => suffix,
        };
        Row::from_prompt(prompt, Some(self.output.draw(rng)))
    }
}

impl Dataset {
    /// Loads or generates the rows; `files` says where relative names point and what may
    /// be read.
    pub fn load<R: Rng>(
        spec: &DatasetSpec,
        files: Files<'_>,
        rng: &mut R,
    ) -> Result<Self, DatasetError> {
        let rows = match (&spec.path, &spec.synthetic, &spec.prompts) {
            (Some(p), None, None) => {
                let (path, text) = files.read(p).map_err(DatasetError::Spec)?;
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
            (None, None, Some(prompts)) => prompts
                .iter()
                .map(|p| Row::from_prompt(p.clone(), None))
                .collect(),
            (None, Some(s), None) => {
                s.check().map_err(DatasetError::Spec)?;
                if let Some(spec) = &s.shared_prefix {
                    let prefixes = SharedPrefixes::new(spec, rng).map_err(DatasetError::Spec)?;
                    let made = Made {
                        prefixes,
                        suffix: s.input_tokens,
                        output: s.output_tokens,
                    };
                    return Ok(Dataset {
                        rows: Vec::new(),
                        made: Some(made),
                    });
                }
                (0..s.count().max(1))
                    .map(|_| {
                        let n = s.input_tokens.draw_prompt(rng);
                        Row::from_prompt(words::random(rng, n), Some(s.output_tokens.draw(rng)))
                    })
                    .collect()
            }
            _ => {
                return Err(DatasetError::Spec(
                    "a dataset needs exactly one of `path`, `prompts` or `synthetic`".into(),
                ));
            }
        };
        if rows.is_empty() {
            return Err(DatasetError::Spec("dataset has no prompts".into()));
        }
        if let Some(i) = rows.iter().position(|r| r.prompt.len() > MAX_PROMPT_BYTES) {
            return Err(DatasetError::Spec(format!(
                "prompt {} is {} bytes, above the limit of {} MiB: shorten it",
                i + 1,
                rows[i].prompt.len(),
                MAX_PROMPT_BYTES >> 20
            )));
        }
        Ok(Dataset { rows, made: None })
    }

    /// A dataset of given rows.
    #[must_use]
    pub fn from_rows(rows: Vec<Row>) -> Self {
        Dataset { rows, made: None }
    }

    /// Number of stored rows (none for a shared-prefix synthetic dataset, which makes a row
    /// per request).
    #[must_use]
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether no row is stored (a loaded dataset has rows, or makes them).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The row of one request: a stored row drawn uniformly, or a shared-prefix synthetic
    /// dataset's new row.
    ///
    /// # Panics
    /// On a dataset with neither rows nor a way to make them (never one that was loaded).
    pub fn pick<R: Rng>(&self, rng: &mut R) -> Row {
        match &self.made {
            Some(m) => m.row(rng),
            None => self.rows[rng.random_range(0..self.rows.len())].clone(),
        }
    }

    /// Whether rows carry recorded conversations with replies (`ShareGPT`).
    #[must_use]
    pub fn has_conversations(&self) -> bool {
        self.rows
            .iter()
            .any(|r| r.turns.iter().any(|t| t.reply.is_some()))
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
            turns: Vec::new(),
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
            prompts: None,
        };
        let a = Dataset::load(&spec("a.jsonl"), Files::Relative(&dir), &mut rng).unwrap();
        assert_eq!(a.len(), 2);
        assert_eq!(a.rows[0].field("lang"), "en");
        let b = Dataset::load(&spec("b.json"), Files::Relative(&dir), &mut rng).unwrap();
        assert_eq!(b.rows.len(), 1);
        assert_eq!(
            (b.rows[0].prompt.as_str(), b.rows[0].output_tokens),
            ("q1", Some(3))
        );
        assert_eq!(
            b.rows[0].turns,
            vec![Turn {
                user: "q1".into(),
                reply: Some("a b c".into())
            }]
        );
        let e = Dataset::load(&spec("bad.jsonl"), Files::Relative(&dir), &mut rng)
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
                count: Some(10),
                shared_prefix: None,
            }),
            prompts: None,
        };
        let s = Dataset::load(&syn, Files::Relative(&dir), &mut rng).unwrap();
        assert_eq!(s.len(), 10);
        assert!(
            s.rows
                .iter()
                .all(|r| r.prompt.split(' ').count() == 50 && r.output_tokens.unwrap() >= 1)
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn synthetic_sizes_and_prompt_lengths_are_capped() {
        let mut rng = SmallRng::seed_from_u64(1);
        let syn = |count: usize, mean: f64, stddev: f64| DatasetSpec {
            path: None,
            format: None,
            field: None,
            synthetic: Some(Synthetic {
                input_tokens: Length { mean, stddev },
                output_tokens: Length {
                    mean: 10.0,
                    stddev: 0.0,
                },
                count: Some(count),
                shared_prefix: None,
            }),
            prompts: None,
        };
        for (spec, says) in [
            (syn(10_000_000, 1.0, 0.0), "above 1000000"),
            (syn(1000, 1e9, 0.0), "input_tokens.mean"),
            (syn(1_000_000, 4000.0, 0.0), "lower `count`"),
            (syn(1000, 100.0, f64::INFINITY), "finite"),
        ] {
            let e = Dataset::load(&spec, Files::Confined(None), &mut rng).unwrap_err();
            assert!(e.to_string().contains(says), "{e}");
        }
        let long = DatasetSpec {
            prompts: Some(vec!["ok".into(), "x".repeat(MAX_PROMPT_BYTES + 1)]),
            ..syn(1, 1.0, 0.0)
        };
        let long = DatasetSpec {
            synthetic: None,
            ..long
        };
        let e = Dataset::load(&long, Files::Confined(None), &mut rng).unwrap_err();
        assert!(e.to_string().contains("prompt 2 is"), "{e}");
    }

    #[test]
    fn shared_prefixes_carry_their_shares_before_a_suffix_of_each_request() {
        let yaml = "input_tokens: {mean: 12}\noutput_tokens: {mean: 5}\nshared_prefix: {prefixes: 3, tokens: 40, fraction: 0.25}\n";
        let spec = DatasetSpec {
            path: None,
            format: None,
            field: None,
            synthetic: Some(serde_norway::from_str(yaml).unwrap()),
            prompts: None,
        };
        let mut rng = SmallRng::seed_from_u64(4);
        let d = Dataset::load(&spec, Files::Confined(None), &mut rng).unwrap();
        let n = 8000;
        let rows: Vec<Row> = (0..n).map(|_| d.pick(&mut rng)).collect();
        let mut by_prefix = std::collections::BTreeMap::<String, usize>::new();
        for r in &rows {
            let words: Vec<&str> = r.prompt.split(' ').collect();
            assert_eq!(r.output_tokens, Some(5));
            let key = if words.len() == 52 {
                words[..40].join(" ")
            } else {
                assert_eq!(words.len(), 12, "{}", r.prompt);
                String::new()
            };
            *by_prefix.entry(key).or_default() += 1;
        }
        // Three prefixes of a quarter each, a quarter without one.
        assert_eq!(by_prefix.len(), 4, "{by_prefix:?}");
        for (prefix, count) in &by_prefix {
            let share = *count as f64 / f64::from(n);
            assert!((share - 0.25).abs() < 0.025, "{prefix:?}: {share}");
        }
        // Every request's prompt is its own.
        let distinct: std::collections::BTreeSet<&String> =
            rows.iter().map(|r| &r.prompt).collect();
        assert_eq!(distinct.len(), rows.len());
        // `count` means stored prompts: it has no place here.
        let mut with_count = spec.clone();
        with_count.synthetic.as_mut().unwrap().count = Some(10);
        let e = Dataset::load(&with_count, Files::Confined(None), &mut rng).unwrap_err();
        assert!(e.to_string().contains("drop `count`"), "{e}");
        let mut too_many = spec;
        too_many
            .synthetic
            .as_mut()
            .unwrap()
            .shared_prefix
            .as_mut()
            .unwrap()
            .fraction = Some(0.5);
        let e = Dataset::load(&too_many, Files::Confined(None), &mut rng).unwrap_err();
        assert!(e.to_string().contains("add up to 1.500"), "{e}");
    }

    #[test]
    fn inline_prompts_need_no_file() {
        let spec = DatasetSpec {
            path: None,
            format: None,
            field: None,
            synthetic: None,
            prompts: Some(vec!["one".into(), "two".into()]),
        };
        let mut rng = SmallRng::seed_from_u64(1);
        let d = Dataset::load(&spec, Files::Confined(None), &mut rng).unwrap();
        assert_eq!(d.len(), 2);
        let both = DatasetSpec {
            path: Some("x.jsonl".into()),
            ..spec
        };
        let e = Dataset::load(&both, Files::Confined(None), &mut rng).unwrap_err();
        assert!(e.to_string().contains("exactly one of"), "{e}");
    }
}

//! A dataset loaded (a file's rows, inline prompts, synthetic prompts, or a shared-prefix
//! maker of rows) and a request's row picked from it.

use rand::Rng;

use super::parse::{DatasetError, parse_jsonl, parse_sharegpt};
use super::row::Row;
use super::spec::{DatasetSpec, Format, Length};
use crate::loadgen::scenario::{files::Files, shared_prefix::SharedPrefixes, words};

/// Longest prompt of a dataset, bytes (a file's rows, inline or synthetic prompts).
pub const MAX_PROMPT_BYTES: usize = 1 << 20;

/// Loaded prompts.
#[derive(Debug, Clone)]
pub struct Dataset {
    pub(super) rows: Vec<Row>,
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

//! Where a dataset comes from, as a scenario writes it: a file and its format, inline prompts,
//! or synthetic lengths (their size checks, and the lengths drawn).

use std::path::PathBuf;

use rand::Rng;
use rand_distr::{Distribution, Normal};
use serde::Deserialize;

use crate::loadgen::scenario::{
    shared_prefix::SharedPrefixSpec,
    words::{MAX_SYNTHETIC_PROMPT_WORDS, MAX_SYNTHETIC_WORDS},
};

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

/// Most distinct synthetic prompts.
pub const MAX_SYNTHETIC_COUNT: usize = 1_000_000;

impl Synthetic {
    /// The size checks: each prompt and all of them together stay within memory caps.
    pub(super) fn check(&self) -> Result<(), String> {
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
    pub(super) fn count(&self) -> usize {
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
    pub(super) fn draw<R: Rng>(self, rng: &mut R) -> u32 {
        let v = Normal::new(self.mean, self.stddev.max(0.0)).map_or(self.mean, |n| n.sample(rng));
        v.round().clamp(1.0, 1e7) as u32
    }

    /// A prompt length: as [`Length::draw`], at most [`MAX_SYNTHETIC_PROMPT_WORDS`].
    pub(super) fn draw_prompt<R: Rng>(self, rng: &mut R) -> u32 {
        self.draw(rng).min(MAX_SYNTHETIC_PROMPT_WORDS as u32)
    }
}

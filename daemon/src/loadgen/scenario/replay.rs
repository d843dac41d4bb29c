//! What the rows of a Mooncake trace send (`load: {shape: trace, format: mooncake}`): each
//! row's prompt, built from its prefix block ids, and how much of the replay's prompt text
//! repeats leading blocks an earlier row already sent.
//!
//! Each block id stands for `block_size` words of the built-in vocabulary, drawn from a stream
//! seeded by the id (`words::seeded`): the same id is the same text in every row, run and
//! machine. A row's prompt is its blocks' words in order, cut to `input_length` words (a last,
//! partial block is a prefix of that block's full text); words its `hash_ids` do not cover are
//! its own, seeded by its line in the file. So rows with equal leading hash ids have
//! byte-identical leading text, and identical leading tokens on any tokenizer that tokenizes
//! whole words the same way wherever they stand (word-boundary pre-tokenization); a tokenizer
//! that merges across the space between two blocks can differ by one token there.

use std::collections::HashMap;

use serde::Deserialize;

use crate::loadgen::scenario::{Load, Phase, dataset::Row, words};
use crate::measure::{prefix::PrefixSharing, record::Endpoint};

/// Seeds block texts apart from the words of a row's own.
const BLOCK_TAG: u64 = 0x6d6f_6f6e_6361_6b65;
/// Seeds a row's own words (those its `hash_ids` do not cover).
const OWN_TAG: u64 = 0x6f77_6e5f_776f_7264;

/// How a trace file's rows are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TraceFormat {
    /// A time per line: seconds, or JSON `timestamp` (seconds) / `timestamp_ms`.
    #[default]
    Timestamps,
    /// Mooncake rows: `timestamp` (ms), `input_length`, `output_length`, `hash_ids`.
    Mooncake,
}

/// One row of a Mooncake trace: what one arrival sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceRow {
    /// Its 1-based line in the trace file (seeds its own words).
    pub line: u64,
    /// Prompt length, tokens (words).
    pub input_length: u32,
    /// Tokens to generate, sent as `max_tokens` with `ignore_eos`.
    pub output_length: u32,
    /// Ids of the prompt's blocks, in order.
    pub hash_ids: Box<[u64]>,
}

/// The rows a phase replays, in arrival order, with their prefix sharing.
#[derive(Clone)]
pub struct Replay {
    block_size: u32,
    rows: Vec<TraceRow>,
    sharing: PrefixSharing,
}

impl std::fmt::Debug for Replay {
    // A trace holds thousands of rows: a debug print names their count, not each one.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replay")
            .field("rows", &self.rows.len())
            .field("block_size", &self.block_size)
            .field("sharing", &self.sharing)
            .finish()
    }
}

impl Replay {
    /// The replay of `rows` (in arrival order), blocks of `block_size` words.
    #[must_use]
    pub fn new(rows: Vec<TraceRow>, block_size: u32) -> Self {
        let sharing = sharing(&rows, block_size);
        Replay {
            block_size,
            rows,
            sharing,
        }
    }

    /// Only the first `n` rows: those a phase sends before its end.
    #[must_use]
    pub fn keep(mut self, n: usize) -> Self {
        if n < self.rows.len() {
            self.rows.truncate(n);
            self.sharing = sharing(&self.rows, self.block_size);
        }
        self
    }

    /// Number of rows.
    #[must_use]
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether there are no rows.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Row `i` (tests look at what a trace gave).
    #[cfg(test)]
    pub(crate) fn row(&self, i: usize) -> &TraceRow {
        &self.rows[i]
    }

    /// The prefix sharing of the rows.
    #[must_use]
    pub fn sharing(&self) -> &PrefixSharing {
        &self.sharing
    }

    /// What arrival `i` sends: row `i`'s prompt and output length (a request beyond the
    /// trace's rows, such as a stampede's, wraps around); `None` without rows.
    #[must_use]
    pub fn request(&self, i: usize) -> Option<Row> {
        if self.rows.is_empty() {
            return None;
        }
        let r = &self.rows[i % self.rows.len()];
        Some(Row::from_prompt(self.prompt(r), Some(r.output_length)))
    }

    /// Row `r`'s prompt: its blocks' words, then its own, `input_length` words in all.
    fn prompt(&self, r: &TraceRow) -> String {
        // Most words of the vocabulary are 4 to 7 bytes, with their space.
        let mut out = String::with_capacity(r.input_length as usize * 7);
        let mut left = r.input_length;
        for id in &r.hash_ids {
            if left == 0 {
                break;
            }
            let n = left.min(self.block_size);
            words::seeded(words::mix(id ^ BLOCK_TAG), n, &mut out);
            left -= n;
        }
        if left > 0 {
            words::seeded(words::mix(r.line ^ OWN_TAG), left, &mut out);
        }
        out
    }
}

/// What is wrong with a phase replaying a Mooncake trace, if anything: its rows give each
/// request's prompt and `max_tokens`, so the request says only where and how they are sent.
pub(super) fn problem(p: &Phase) -> Option<String> {
    let Load::Trace { spec, .. } = &p.load else {
        return None;
    };
    if spec.format != TraceFormat::Mooncake {
        return None;
    }
    let r = &p.request;
    let endpoint = r.endpoint.unwrap_or(Endpoint::Chat);
    if !matches!(endpoint, Endpoint::Chat | Endpoint::Completions) {
        return Some(format!(
            "a Mooncake trace replays LLM requests: `request.endpoint` must be chat or completions, not {}",
            endpoint.label()
        ));
    }
    let given = [
        ("prompt", r.prompt.is_some()),
        ("dataset", r.dataset.is_some()),
        ("max_tokens", r.max_tokens.is_some()),
        ("conversation", r.conversation.is_some()),
        ("pipeline", r.pipeline.is_some()),
        ("session", r.session.is_some()),
    ];
    given.iter().find(|(_, g)| *g).map(|(field, _)| {
        format!(
            "a Mooncake trace builds each request's prompt and `max_tokens` from its row: drop `request.{field}`"
        )
    })
}

/// How much of `rows`' prompt text an infinite prefix cache would hit, replayed in order: a
/// block hits when an earlier row sent it after the same leading blocks (its chain of ids),
/// for as many words as the longest of those sendings had (a partial last block is a prefix
/// of the full one). Words beyond a row's blocks are its own and never hit.
fn sharing(rows: &[TraceRow], block_size: u32) -> PrefixSharing {
    // Chain of ids so far -> the most words of its last block sent.
    let mut sent: HashMap<u64, u32> = HashMap::new();
    let (mut prompt, mut shared) = (0u64, 0u64);
    for r in rows {
        prompt += u64::from(r.input_length);
        let (mut chain, mut left) = (0u64, r.input_length);
        for id in &r.hash_ids {
            if left == 0 {
                break;
            }
            let n = left.min(block_size);
            chain = words::mix(chain.rotate_left(17) ^ words::mix(*id));
            let most = sent.entry(chain).or_insert(0);
            shared += u64::from(n.min(*most));
            *most = (*most).max(n);
            left -= n;
        }
    }
    PrefixSharing::new(rows.len() as u64, prompt, shared, block_size)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(line: u64, input: u32, ids: &[u64]) -> TraceRow {
        TraceRow {
            line,
            input_length: input,
            output_length: 7,
            hash_ids: ids.into(),
        }
    }

    fn prompt(r: &Replay, i: usize) -> String {
        r.request(i).unwrap().prompt
    }

    #[test]
    fn equal_leading_hash_ids_give_byte_identical_leading_text() {
        let r = Replay::new(
            vec![
                row(1, 10, &[1, 2, 3]),
                row(2, 9, &[1, 2, 9]),
                row(3, 7, &[1, 2, 3]),
                row(4, 10, &[5, 2, 3]),
            ],
            4,
        );
        let p: Vec<String> = (0..4).map(|i| prompt(&r, i)).collect();
        for (i, p) in p.iter().enumerate() {
            let want = r.row(i).input_length as usize;
            assert_eq!(p.split(' ').count(), want, "row {i}: {p}");
            assert!(!p.starts_with(' ') && !p.ends_with(' ') && !p.contains("  "));
        }
        let words = |s: &str, n: usize| s.split(' ').take(n).collect::<Vec<_>>().join(" ");
        // Two shared blocks: the first 8 words are the same bytes, the third block differs.
        assert_eq!(words(&p[0], 8), words(&p[1], 8));
        assert_ne!(words(&p[0], 9), words(&p[1], 9));
        // A shorter row with the same ids is a prefix of the longer one.
        assert!(p[0].starts_with(&p[2]));
        // A different first block changes the start, even with the same later ids.
        assert_ne!(words(&p[0], 4), words(&p[3], 4));
        // The same row, asked again, is the same text; a wrapped index replays row 0.
        assert_eq!(prompt(&r, 0), p[0]);
        assert_eq!(prompt(&r, 4), p[0]);
        assert_eq!(r.request(1).unwrap().output_tokens, Some(7));
    }

    #[test]
    fn words_beyond_the_blocks_are_the_rows_own() {
        // No hash ids, or too few: the rest of the prompt is unique to the row.
        let r = Replay::new(
            vec![
                row(1, 6, &[]),
                row(2, 6, &[]),
                row(3, 6, &[4]),
                row(4, 6, &[4]),
            ],
            4,
        );
        let p: Vec<String> = (0..4).map(|i| prompt(&r, i)).collect();
        assert_ne!(p[0], p[1]);
        assert_eq!(
            p[2].split(' ').take(4).collect::<Vec<_>>(),
            p[3].split(' ').take(4).collect::<Vec<_>>()
        );
        assert_ne!(p[2], p[3]);
        assert!(p.iter().all(|p| p.split(' ').count() == 6));
        assert!(Replay::new(Vec::new(), 4).request(0).is_none());
    }

    /// The error of a scenario replaying `trace.jsonl` (two Mooncake rows) with `load` and
    /// `request`, or the sharing of its phase.
    fn scenario(load: &str, request: &str) -> Result<PrefixSharing, String> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("trace.jsonl"),
            "{\"timestamp\": 0, \"input_length\": 8, \"output_length\": 2, \"hash_ids\": [1, 2]}\n\
             {\"timestamp\": 900, \"input_length\": 8, \"output_length\": 2, \"hash_ids\": [1, 3]}\n",
        )
        .unwrap();
        let src = format!(
            "target: http://127.0.0.1:8000\nphases:\n  - name: r\n    duration: 2s\n    load: {load}\n    request: {request}\n"
        );
        let plan = crate::loadgen::Plan::from_yaml(&src, "t.yaml", dir.path())
            .map_err(|e| e.to_string())?;
        Ok(plan.scenario().phases[0].load.prefix_sharing().unwrap())
    }

    #[test]
    fn a_replay_phase_takes_its_prompts_from_the_rows() {
        let s = scenario(
            "{shape: trace, path: trace.jsonl, format: mooncake, block_size: 4}",
            "{endpoint: completions}",
        )
        .unwrap();
        assert_eq!((s.requests, s.prompt_tokens, s.shared_tokens), (2, 16, 4));
        // Only the rows sent before the phase's end count: at speed 0.4 the second is at
        // 2.25 s, after the 2 s phase; a window from 0.5 s leaves only the second.
        let s = scenario(
            "{shape: trace, path: trace.jsonl, format: mooncake, speed: 0.4, block_size: 4}",
            "{}",
        )
        .unwrap();
        assert_eq!(s.requests, 1);
        let s = scenario(
            "{shape: trace, path: trace.jsonl, format: mooncake, block_size: 4, window: {from: 500ms}}",
            "{}",
        )
        .unwrap();
        assert_eq!((s.requests, s.shared_tokens), (1, 0));
        for (load, request, says) in [
            (
                "{shape: trace, path: trace.jsonl, format: mooncake, block_size: 4}",
                "{prompt: hi}",
                "builds each request's prompt and `max_tokens` from its row: drop `request.prompt`",
            ),
            (
                "{shape: trace, path: trace.jsonl, format: mooncake, block_size: 4}",
                "{max_tokens: 9}",
                "drop `request.max_tokens`",
            ),
            (
                "{shape: trace, path: trace.jsonl, format: mooncake, block_size: 4}",
                "{endpoint: http}",
                "must be chat or completions, not http",
            ),
            (
                "{shape: trace, path: trace.jsonl, block_size: 4}",
                "{}",
                "set `format: mooncake`, or drop it",
            ),
            (
                "{shape: trace, path: trace.jsonl}",
                "{}",
                "a Mooncake row (`timestamp` in ms",
            ),
            (
                "{shape: trace, path: trace.jsonl, format: mooncake}",
                "{}",
                "set the load's `block_size` to the trace's",
            ),
            (
                "{shape: trace, path: trace.jsonl, format: mooncake, window: {from: 2s, until: 1s}}",
                "{}",
                "`until` must be after `from`",
            ),
            (
                "{shape: trace, path: trace.jsonl, format: csv}",
                "{}",
                "unknown variant `csv`",
            ),
            (
                "{shape: trace, path: trace.jsonl, format: mooncake, block_size: 4, window: {from: 1m}}",
                "{}",
                "no row of the trace falls in `window`",
            ),
        ] {
            let e = scenario(load, request).unwrap_err();
            assert!(e.contains(says), "{load} {request}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn sharing_counts_blocks_sent_after_the_same_leading_blocks() {
        let r = Replay::new(
            vec![
                row(1, 8, &[1, 2]),     // 8 new
                row(2, 8, &[1, 2]),     // 8 shared
                row(3, 10, &[1, 3, 4]), // block 1 shared (4), 3 and 4 new
                row(4, 8, &[9, 2]),     // 2 after 9 is a new prefix: nothing shared
                row(5, 6, &[1, 3]),     // 4 + 2 (a partial block of one sent whole)
            ],
            4,
        );
        let s = r.sharing();
        assert_eq!(s.requests, 5);
        assert_eq!(s.prompt_tokens, 40);
        assert_eq!(s.shared_tokens, 8 + 4 + 6);
        assert!((s.sharing_ratio - 18.0 / 40.0).abs() < 1e-12);
        assert_eq!(s.block_size, 4);
        // A partial block sent first shares only its words with a fuller one after it.
        let r = Replay::new(vec![row(1, 6, &[1, 2]), row(2, 8, &[1, 2])], 4);
        assert_eq!(r.sharing().shared_tokens, 4 + 2);
        // Keeping the first rows recomputes it.
        let kept = r.keep(1);
        assert_eq!((kept.len(), kept.sharing().shared_tokens), (1, 0));
    }
}

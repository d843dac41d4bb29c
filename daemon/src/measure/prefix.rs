//! A replayed trace's prefix structure, as its phase's report states it: how much of the
//! prompt text the replay sends repeats leading blocks an earlier request of the replay already
//! sent. That share is the hit rate of an infinite prefix cache, the most any server's prefix
//! cache can reach on the replay; `report.json` sets the server's own hit rate beside it.

use serde::{Deserialize, Serialize};

/// The prefix sharing of the requests a phase replays from a trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PrefixSharing {
    /// Requests of the trace the phase replays (inside its window and its duration).
    pub requests: u64,
    /// Their prompt tokens (the rows' `input_length`s; one word of the built prompts is about
    /// one token).
    pub prompt_tokens: u64,
    /// Of those, the tokens of blocks that an earlier request of the replay sent after the
    /// same leading blocks: what an infinite prefix cache would hit.
    pub shared_tokens: u64,
    /// `shared_tokens / prompt_tokens` (0 without prompt tokens).
    pub sharing_ratio: f64,
    /// Tokens per hash block of the trace.
    pub block_size: u32,
}

impl PrefixSharing {
    /// The sharing of `requests` requests sending `prompt_tokens`, `shared_tokens` of them in
    /// blocks sent before.
    #[must_use]
    pub fn new(requests: u64, prompt_tokens: u64, shared_tokens: u64, block_size: u32) -> Self {
        let sharing_ratio = if prompt_tokens == 0 {
            0.0
        } else {
            shared_tokens as f64 / prompt_tokens as f64
        };
        PrefixSharing {
            requests,
            prompt_tokens,
            shared_tokens,
            sharing_ratio,
            block_size,
        }
    }
}

//! The wire format of a streamed chat or completions chunk, read in place (its text, finish
//! reason, usage, tool-call pieces and logprobs), and a token's entropy from its logprobs.

use std::borrow::Cow;

/// One streamed piece of a tool call (`delta.tool_calls[i]`); a whole answer's calls read
/// the same way (`message.tool_calls[i]`, without `index`).
#[derive(Debug, serde::Deserialize)]
pub(super) struct ToolCallPiece {
    #[serde(default)]
    pub(super) index: Option<usize>,
    #[serde(default)]
    pub(super) id: Option<String>,
    #[serde(default)]
    pub(super) function: Option<FunctionPiece>,
}

#[derive(Debug, serde::Deserialize)]
pub(super) struct FunctionPiece {
    #[serde(default)]
    pub(super) name: Option<String>,
    #[serde(default)]
    pub(super) arguments: Option<String>,
}

/// What one chunk says: whether it carries text, and the finish reason and usage if any.
#[derive(Clone, Copy)]
pub(super) struct Summary<'a> {
    /// The chunk's text, when not empty.
    pub(super) text: Option<&'a str>,
    pub(super) finish_reason: Option<&'a str>,
    pub(super) completion_tokens: Option<u64>,
    pub(super) prompt_tokens: Option<u64>,
}

/// The fields of a streamed chunk that matter, borrowed from its text where possible: every
/// token arrives as one of these, so no `Value` tree is built for it.
#[derive(serde::Deserialize)]
pub(super) struct Chunk<'a> {
    #[serde(default, borrow)]
    pub(super) choices: Vec<ChunkChoice<'a>>,
    #[serde(default)]
    usage: Option<ChunkUsage>,
    #[serde(default)]
    pub(super) error: Option<serde::de::IgnoredAny>,
}

#[derive(serde::Deserialize)]
pub(super) struct ChunkChoice<'a> {
    #[serde(default)]
    logprobs: Option<ChunkLogprobs>,
    #[serde(default, borrow)]
    pub(super) delta: Option<ChunkDelta<'a>>,
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(serde::Deserialize)]
pub(super) struct ChunkDelta<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(default)]
    pub(super) tool_calls: Option<Vec<ToolCallPiece>>,
}

/// `choices[0].logprobs` of a chat answer: per token, the top alternatives.
#[derive(serde::Deserialize)]
struct ChunkLogprobs {
    #[serde(default)]
    content: Option<Vec<TokenLogprobs>>,
}

#[derive(serde::Deserialize)]
struct TokenLogprobs {
    #[serde(default)]
    top_logprobs: Vec<TopLogprob>,
}

#[derive(serde::Deserialize)]
struct TopLogprob {
    logprob: f64,
}

/// Entropy (nats) of one token's distribution from its top-k log-probabilities, the mass
/// outside the top k counted as one more outcome: a lower bound of the true entropy (the tail's
/// own spread is not seen), exact when the top k hold all the mass.
#[must_use]
pub fn token_entropy(logprobs: impl IntoIterator<Item = f64>) -> Option<f64> {
    let mut h = 0.0;
    let mut mass = 0.0;
    let mut n = 0;
    for lp in logprobs {
        let p = lp.exp();
        if p.is_finite() && p > 0.0 {
            h -= p * p.ln();
            mass += p;
            n += 1;
        }
    }
    if n == 0 {
        return None;
    }
    let rest = 1.0 - mass;
    if rest > 1e-12 {
        h -= rest * rest.ln();
    }
    Some(h.max(0.0))
}

#[derive(serde::Deserialize)]
struct ChunkUsage {
    completion_tokens: Option<u64>,
    prompt_tokens: Option<u64>,
}

impl Chunk<'_> {
    /// Entropies of the tokens this chunk carries logprobs for.
    pub(super) fn entropies(&self) -> impl Iterator<Item = f64> + '_ {
        self.choices
            .first()
            .and_then(|c| c.logprobs.as_ref()?.content.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|t| token_entropy(t.top_logprobs.iter().map(|x| x.logprob)))
    }

    pub(super) fn summary(&self) -> Summary<'_> {
        let c = self.choices.first();
        let d = c.and_then(|c| c.delta.as_ref());
        // Same precedence as the `Value` path: delta content, text, reasoning content.
        let text = d
            .and_then(|d| d.content.as_deref())
            .or_else(|| c.and_then(|c| c.text.as_deref()))
            .or_else(|| d.and_then(|d| d.reasoning_content.as_deref()));
        Summary {
            text: text.filter(|t| !t.is_empty()),
            finish_reason: c.and_then(|c| c.finish_reason.as_deref()),
            completion_tokens: self.usage.as_ref().and_then(|u| u.completion_tokens),
            prompt_tokens: self.usage.as_ref().and_then(|u| u.prompt_tokens),
        }
    }
}

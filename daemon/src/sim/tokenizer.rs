//! The simulator's deterministic tokenizer, so that prompt and completion token counts (and
//! therefore `usage`) are exact.
//!
//! Rules, applied left to right:
//! 1. a single space followed by an ASCII letter or digit is glued to the word that follows;
//! 2. a run of ASCII letters/digits is one token per started 8 characters;
//! 3. any other character (punctuation, non-ASCII, whitespace not covered by rule 1) is one token.
//!
//! So `"Hello, world!"` is `["Hello", ",", " world", "!"]` = 4 tokens. A token's id is the FNV-1a
//! hash of its text modulo [`VOCAB_SIZE`]. Generated tokens are drawn from [`WORDS`] as
//! `" word"`: each re-tokenizes to exactly one token, so completion counts are exact too.
//!
//! Chat prompts are rendered the way `OpenAI` documents its counting: every message costs
//! 3 tokens of framing plus its role and content, and the reply is primed with 3 more.

/// Size of the id space.
pub const VOCAB_SIZE: u32 = 32_000;

/// Words the simulated model generates (all ASCII, at most 8 characters).
pub const WORDS: &[&str] = &[
    "the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be",
    "by", "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have",
    "an", "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there",
    "been", "if", "more", "when", "will", "would", "who", "so", "no", "model", "token", "cache",
    "latency", "queue", "memory", "request", "server", "batch", "kernel", "tensor", "prefill",
    "decode", "block", "stream", "vector", "index", "search", "result", "answer", "question",
    "data", "time", "system", "network", "process", "thread", "engine", "value", "layer", "weight",
    "input", "output", "context", "prompt", "user", "agent", "tool", "call", "error", "retry",
    "load", "test", "metric", "signal", "window", "graph", "node", "edge", "path", "cluster",
    "shard", "replica", "leader", "follower", "write", "read", "commit", "record", "event",
    "trace", "span", "probe", "sample", "rate", "peak", "tail", "median", "mean", "quickly",
    "slowly", "because", "however", "thus", "also", "then", "first", "second", "last", "next",
    "after", "before", "during", "under", "over", "between", "through",
];

/// FNV-1a, 64 bit: stable across platforms and releases (unlike `DefaultHasher`).
#[must_use]
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Splits `text` into token strings by the rules in the module documentation.
#[must_use]
pub fn pieces(text: &str) -> Vec<&str> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < text.len() {
        let start = i;
        let word_at = |j: usize| j < bytes.len() && bytes[j].is_ascii_alphanumeric();
        if bytes[i] == b' ' && word_at(i + 1) {
            i += 1;
        }
        if word_at(i) {
            let word_start = i;
            while word_at(i) && i - word_start < 8 {
                i += 1;
            }
            out.push(&text[start..i]);
            continue;
        }
        // One character, possibly multi-byte.
        let ch_len = text[i..].chars().next().map_or(1, char::len_utf8);
        i += ch_len;
        out.push(&text[start..i]);
    }
    out
}

/// Token id of one piece.
#[must_use]
pub fn piece_id(piece: &str) -> u32 {
    (fnv1a(piece.as_bytes()) % u64::from(VOCAB_SIZE)) as u32
}

/// Token ids of `text`.
#[must_use]
pub fn encode(text: &str) -> Vec<u32> {
    pieces(text).into_iter().map(piece_id).collect()
}

/// Number of tokens of `text`.
#[must_use]
pub fn count(text: &str) -> usize {
    pieces(text).len()
}

/// Token ids of a chat conversation `(role, content)`, including the framing described in the
/// module documentation.
#[must_use]
pub fn encode_chat<'a>(messages: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<u32> {
    const IM_START: u32 = VOCAB_SIZE - 1;
    const IM_SEP: u32 = VOCAB_SIZE - 2;
    const IM_END: u32 = VOCAB_SIZE - 3;
    let mut ids = Vec::new();
    for (role, content) in messages {
        ids.push(IM_START);
        ids.extend(encode(role));
        ids.push(IM_SEP);
        ids.extend(encode(content));
        ids.push(IM_END);
    }
    ids.extend([IM_START, piece_id("assistant"), IM_SEP]);
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documented_example() {
        assert_eq!(pieces("Hello, world!"), ["Hello", ",", " world", "!"]);
        assert_eq!(pieces("abcdefghij"), ["abcdefgh", "ij"]);
        assert_eq!(pieces("  a\né"), [" ", " a", "\n", "é"]);
        assert_eq!(count(""), 0);
    }

    #[test]
    fn pieces_cover_the_text() {
        let t = "Grüße, 世界! tokens  and\tmore... x1y2z3w4v5";
        assert_eq!(pieces(t).concat(), t);
    }

    #[test]
    fn generated_words_are_one_token_each() {
        for w in WORDS {
            assert!(w.len() <= 8 && w.bytes().all(|b| b.is_ascii_alphanumeric()));
            assert_eq!(count(&format!(" {w}")), 1);
        }
        let text: String = WORDS.iter().flat_map(|w| [" ", w]).collect();
        assert_eq!(count(&text), WORDS.len());
    }

    #[test]
    fn chat_framing_counts() {
        // 3 framing + role + content per message, plus 3 to prime the reply.
        let ids = encode_chat([("user", "Hello, world!")]);
        assert_eq!(ids.len(), 3 + 1 + 4 + 3);
        assert_eq!(ids, encode_chat([("user", "Hello, world!")]));
    }
}

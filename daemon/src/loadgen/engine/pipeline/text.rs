//! The text a task's chat is sent: its prompt with the documents numbered, and the passages
//! made up for hits that came without text.

use std::fmt::Write as _;

use super::compile::Rendered;

/// Words of a passage made up for a hit without text.
const PASSAGE_WORDS: usize = 32;
/// The words those passages are made of.
const WORDS: [&str; 26] = [
    "cache",
    "kernel",
    "latency",
    "queue",
    "memory",
    "token",
    "batch",
    "index",
    "vector",
    "search",
    "prefill",
    "decode",
    "model",
    "server",
    "request",
    "stream",
    "retry",
    "load",
    "block",
    "eviction",
    "replica",
    "shard",
    "network",
    "thread",
    "scheduler",
    "gpu",
];

/// The chat prompt's text: the pieces, `${docs}` numbered one per line.
pub(super) fn prompt_text(parts: &[Rendered], query: &str, docs: &[String]) -> String {
    let mut out = String::new();
    for p in parts {
        match p {
            Rendered::Text(t) => out.push_str(t),
            Rendered::Query => out.push_str(query),
            Rendered::Docs => {
                for (i, d) in docs.iter().enumerate() {
                    if i > 0 {
                        out.push('\n');
                    }
                    let _ = write!(out, "[{}] {d}", i + 1);
                }
            }
        }
    }
    out
}

/// A passage made up for hit `id` (a vector API that returns no text): the same for the same
/// id, made of words a re-ranker can score.
pub(super) fn passage(id: &str) -> String {
    // FNV-1a of the id, then a mix per word.
    let mut h = id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let mut words = Vec::with_capacity(PASSAGE_WORDS);
    for _ in 0..PASSAGE_WORDS {
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 29;
        words.push(WORDS[(h % WORDS.len() as u64) as usize]);
    }
    format!("passage {id}: {}", words.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_and_passages() {
        let parts = vec![
            Rendered::Text("C:\n".into()),
            Rendered::Docs,
            Rendered::Text("\nQ: ".into()),
            Rendered::Query,
        ];
        let docs = vec!["a".to_owned(), "b".to_owned()];
        assert_eq!(
            prompt_text(&parts, "why", &docs),
            "C:\n[1] a\n[2] b\nQ: why"
        );
        assert_eq!(passage("7"), passage("7"));
        assert_ne!(passage("7"), passage("8"));
        assert!(passage("7").starts_with("passage 7: "));
    }
}

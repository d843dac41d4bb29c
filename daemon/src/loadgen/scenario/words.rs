//! The built-in vocabulary synthetic prompts are made of, and word streams drawn from it.
//!
//! Every word is a plain lower-case English word, so one word is about one token on the usual
//! tokenizers (the simulator's counts each as one, `summarise` as two). Two kinds of stream:
//! drawn from the run's generator (each prompt its own), or seeded by a number (the same seed
//! always gives the same words, on every machine and release: a trace's prefix block is the
//! same text in every run).

use rand::Rng;

/// Most words (about tokens) of all synthetic prompts together, counted at mean + 3 stddev:
/// about 150 MB of text.
pub const MAX_SYNTHETIC_WORDS: f64 = 16e6;
/// Longest synthetic prompt, words (each at most 9 bytes with its space: under 1.2 MiB).
pub const MAX_SYNTHETIC_PROMPT_WORDS: f64 = 131_072.0;

/// The words synthetic prompts are made of.
pub const VOCAB: &[&str] = &[
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

/// `n` words drawn from `rng`, separated by single spaces.
pub fn random<R: Rng>(rng: &mut R, n: u32) -> String {
    let words: Vec<&str> = (0..n)
        .map(|_| VOCAB[rng.random_range(0..VOCAB.len())])
        .collect();
    words.join(" ")
}

/// Appends `n` words of the stream seeded by `seed` to `out`, each after a single space when
/// `out` is not empty. The same seed always gives the same words (`SplitMix64`, which is fixed
/// here rather than borrowed from a crate whose generators may change between releases).
pub fn seeded(seed: u64, n: u32, out: &mut String) {
    let mut state = seed;
    for _ in 0..n {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let z = mix(state);
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(VOCAB[(z % VOCAB.len() as u64) as usize]);
    }
}

/// `SplitMix64`'s finaliser: a well-spread 64-bit hash of `z`.
#[must_use]
pub fn mix(z: u64) -> u64 {
    let z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{SeedableRng, rngs::SmallRng};

    #[test]
    fn a_seed_always_gives_the_same_words_and_seeds_differ() {
        let (mut a, mut b, mut c) = (String::new(), String::new(), String::new());
        seeded(7, 40, &mut a);
        seeded(7, 40, &mut b);
        seeded(8, 40, &mut c);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.split(' ').count(), 40);
        assert!(a.split(' ').all(|w| VOCAB.contains(&w)));
        // SplitMix64's published outputs for seed 0: a change here would change every replayed
        // prompt.
        let outputs: Vec<u64> = (1..=3u64)
            .map(|k| mix(k.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
            .collect();
        assert_eq!(
            outputs,
            [
                0xe220_a839_7b1d_cdaf,
                0x6e78_9e6a_a1b9_65f4,
                0x06c4_5d18_8009_454f
            ]
        );
        // Appending keeps one space between the parts.
        let mut joined = "x".to_string();
        seeded(7, 2, &mut joined);
        assert!(joined.starts_with("x ") && joined.split(' ').count() == 3);
    }

    #[test]
    fn random_words_come_from_the_generator() {
        let mut rng = SmallRng::seed_from_u64(1);
        let s = random(&mut rng, 25);
        assert_eq!(s.split(' ').count(), 25);
        assert_eq!(random(&mut rng, 0), "");
    }
}

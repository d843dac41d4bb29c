//! Deterministic "sampling": each generated token comes from a small per-position distribution
//! derived from the request's seed, so outputs and `logprobs` are reproducible and plausible
//! (temperature flattens or sharpens the distribution exactly as softmax temperature does).

use super::tokenizer::{WORDS, fnv1a};

/// `SplitMix64`: tiny, fast, good enough for simulation draws.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.next_f64().max(f64::MIN_POSITIVE);
        let u2 = self.next_f64();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

/// Candidates considered per position (the top of the distribution).
pub const CANDIDATES: usize = 8;

/// One generated token with its log-probability and the top alternatives.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampled {
    /// Token text (`" word"`).
    pub text: String,
    /// Natural-log probability of the chosen token.
    pub logprob: f64,
    /// Most likely candidates, best first: `(text, logprob)`.
    pub top: Vec<(String, f64)>,
}

/// Generates the tokens of one request.
#[derive(Debug, Clone)]
pub struct Sampler {
    seed: u64,
    temperature: f64,
    alternatives: bool,
}

impl Sampler {
    /// `seed` is the request's seed (or a hash of its prompt when none was given).
    #[must_use]
    pub fn new(seed: u64, temperature: f64) -> Self {
        Self {
            seed,
            temperature: temperature.clamp(0.0, 2.0),
            alternatives: true,
        }
    }

    /// Leaves [`Sampled::top`] empty: for requests without `logprobs`, which never show it
    /// (the same tokens and log-probabilities, without ranking and formatting the rest).
    #[must_use]
    pub fn without_alternatives(mut self) -> Self {
        self.alternatives = false;
        self
    }

    /// The token at `position` (0-based) of the completion: a pure function of seed,
    /// temperature and position, so a preempted and recomputed sequence regenerates the same text.
    #[must_use]
    pub fn token(&self, position: usize) -> Sampled {
        let mut rng = Rng::new(self.seed ^ fnv1a(&(position as u64).to_le_bytes()));
        // Logits: a Zipf-like fall-off over CANDIDATES distinct words.
        // Fixed-size arrays: this runs once per streamed token.
        let mut words: [&str; CANDIDATES] = [""; CANDIDATES];
        let mut n = 0;
        while n < CANDIDATES {
            let w = WORDS[(rng.next_u64() % WORDS.len() as u64) as usize];
            if !words[..n].contains(&w) {
                words[n] = w;
                n += 1;
            }
        }
        let logits: [f64; CANDIDATES] =
            std::array::from_fn(|i| 4.0 - 1.2 * (i as f64 + 1.0).ln() * 2.0 + 0.3 * rng.normal());
        let t = self.temperature.max(1e-3);
        let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = logits.iter().map(|l| ((l - max) / t).exp()).sum();
        let logp: [f64; CANDIDATES] = logits.map(|l| (l - max) / t - z.ln());
        let chosen = if self.temperature < 1e-3 {
            argmax(&logp)
        } else {
            let u = rng.next_f64();
            let mut acc = 0.0;
            let mut pick = CANDIDATES - 1;
            for (i, lp) in logp.iter().enumerate() {
                acc += lp.exp();
                if u < acc {
                    pick = i;
                    break;
                }
            }
            pick
        };
        let top = if self.alternatives {
            let mut order: [usize; CANDIDATES] = std::array::from_fn(|i| i);
            order.sort_by(|a, b| logp[*b].total_cmp(&logp[*a]));
            order
                .into_iter()
                .map(|i| (format!(" {}", words[i]), logp[i]))
                .collect()
        } else {
            Vec::new()
        };
        Sampled {
            text: format!(" {}", words[chosen]),
            logprob: logp[chosen],
            top,
        }
    }
}

fn argmax(v: &[f64]) -> usize {
    v.iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map_or(0, |(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_normalised() {
        let s = Sampler::new(1234, 0.7);
        assert_eq!(s.token(5), s.token(5));
        let t = s.token(3);
        let total: f64 = t.top.iter().map(|(_, lp)| lp.exp()).sum();
        assert!((total - 1.0).abs() < 1e-9);
        assert!(t.top.windows(2).all(|w| w[0].1 >= w[1].1));
        assert!(
            t.top
                .iter()
                .any(|(w, lp)| *w == t.text && (*lp - t.logprob).abs() < 1e-12)
        );
    }

    #[test]
    fn zero_temperature_is_greedy_and_seeds_differ() {
        let s = Sampler::new(9, 0.0);
        for p in 0..20 {
            let t = s.token(p);
            assert_eq!(t.text, t.top[0].0);
        }
        let a: Vec<String> = (0..20)
            .map(|p| Sampler::new(1, 1.0).token(p).text)
            .collect();
        let b: Vec<String> = (0..20)
            .map(|p| Sampler::new(2, 1.0).token(p).text)
            .collect();
        assert_ne!(a, b);
    }

    #[test]
    fn without_alternatives_draws_the_same_tokens() {
        let (full, lean) = (
            Sampler::new(5, 0.8),
            Sampler::new(5, 0.8).without_alternatives(),
        );
        for p in 0..50 {
            let (a, b) = (full.token(p), lean.token(p));
            assert_eq!((a.text, a.logprob), (b.text, b.logprob));
            assert_eq!(a.top.len(), CANDIDATES);
            assert!(b.top.is_empty());
        }
    }
}

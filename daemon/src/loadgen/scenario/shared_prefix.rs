//! Shared-prefix synthetic prompts, the "system prompt + question" shape: a few distinct
//! prefixes, each carried by a given share of the requests, before a suffix of the request's
//! own.
//!
//! ```yaml
//! datasets:
//!   support:
//!     synthetic:
//!       input_tokens: {mean: 64, stddev: 16}    # the suffix (the question), words
//!       output_tokens: {mean: 128}
//!       shared_prefix: {prefixes: 4, tokens: 1024, fraction: 0.2}
//!       # or, one share per prefix: {tokens: 1024, fractions: [0.5, 0.3, 0.1]}
//! ```
//!
//! Each request draws its prefix by the shares (those left over carry none) and a fresh
//! suffix, so no two requests send the same prompt and the prefix is all they share.

use rand::Rng;
use serde::Deserialize;

use crate::loadgen::scenario::words::{self, MAX_SYNTHETIC_PROMPT_WORDS, MAX_SYNTHETIC_WORDS};

/// Most distinct prefixes.
pub const MAX_PREFIXES: usize = 10_000;

/// `synthetic.shared_prefix`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SharedPrefixSpec {
    /// Number of distinct prefixes, each carried by `fraction` of the requests.
    pub prefixes: Option<usize>,
    /// Words (about tokens) of each prefix.
    pub tokens: u32,
    /// Share of the requests that carry each prefix (with `prefixes`).
    pub fraction: Option<f64>,
    /// One share per prefix, instead of `prefixes` and `fraction`.
    pub fractions: Option<Vec<f64>>,
}

/// The prefixes of a dataset and the share of requests that carries each.
#[derive(Debug, Clone)]
pub struct SharedPrefixes {
    texts: Vec<String>,
    /// Running sums of the shares: request u in [0, 1) carries the first prefix whose sum
    /// exceeds u.
    upto: Vec<f64>,
}

impl SharedPrefixes {
    /// Checks `spec` and draws its prefixes from `rng`.
    pub fn new<R: Rng>(spec: &SharedPrefixSpec, rng: &mut R) -> Result<Self, String> {
        let shares = match (spec.prefixes, spec.fraction, &spec.fractions) {
            (Some(n), Some(f), None) => {
                if n == 0 || n > MAX_PREFIXES {
                    return Err(format!(
                        "`shared_prefix.prefixes` {n} must be 1..={MAX_PREFIXES}"
                    ));
                }
                vec![f; n]
            }
            (None, None, Some(list)) if !list.is_empty() && list.len() <= MAX_PREFIXES => {
                list.clone()
            }
            (None, None, Some(_)) => {
                return Err(format!(
                    "`shared_prefix.fractions` needs 1..={MAX_PREFIXES} shares"
                ));
            }
            _ => {
                return Err("`shared_prefix` takes `prefixes` with `fraction` (each prefix's share of the requests), or `fractions` (one share per prefix)".into());
            }
        };
        if let Some(f) = shares
            .iter()
            .find(|f| !(f.is_finite() && **f > 0.0 && **f <= 1.0))
        {
            return Err(format!(
                "a `shared_prefix` share of {f} must be above 0 and at most 1"
            ));
        }
        let total: f64 = shares.iter().sum();
        // A little slack: 3 x 0.333 or 10 x 0.1 add up to 1 in decimal, not in binary.
        if total > 1.0 + 1e-9 {
            return Err(format!(
                "the `shared_prefix` shares add up to {total:.3}: a request carries one prefix, so at most 1"
            ));
        }
        if spec.tokens == 0 || f64::from(spec.tokens) > MAX_SYNTHETIC_PROMPT_WORDS {
            return Err(format!(
                "`shared_prefix.tokens` {} must be 1..={MAX_SYNTHETIC_PROMPT_WORDS}",
                spec.tokens
            ));
        }
        let all = shares.len() as f64 * f64::from(spec.tokens);
        if all > MAX_SYNTHETIC_WORDS {
            return Err(format!(
                "the prefixes are {all:.0} words together, above {MAX_SYNTHETIC_WORDS:.0}: fewer or shorter ones"
            ));
        }
        let mut sum = 0.0;
        let upto = shares
            .iter()
            .map(|f| {
                sum += f;
                sum
            })
            .collect();
        let texts = shares
            .iter()
            .map(|_| words::random(rng, spec.tokens))
            .collect();
        Ok(SharedPrefixes { texts, upto })
    }

    /// The prefix of one request, drawn by the shares; `None` for a request that carries none.
    pub fn draw<R: Rng>(&self, rng: &mut R) -> Option<&str> {
        let u: f64 = rng.random();
        let i = self.upto.partition_point(|s| *s <= u);
        self.texts.get(i).map(String::as_str)
    }

    /// Number of prefixes.
    #[must_use]
    pub fn len(&self) -> usize {
        self.texts.len()
    }

    /// Whether there is none (never, for a checked spec).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.texts.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{SeedableRng, rngs::SmallRng};

    fn spec(
        prefixes: Option<usize>,
        fraction: Option<f64>,
        fractions: Option<Vec<f64>>,
    ) -> SharedPrefixSpec {
        SharedPrefixSpec {
            prefixes,
            tokens: 32,
            fraction,
            fractions,
        }
    }

    #[test]
    fn each_prefix_is_drawn_by_its_share() {
        let mut rng = SmallRng::seed_from_u64(11);
        for (s, want) in [
            (
                spec(Some(4), Some(0.2), None),
                vec![0.2, 0.2, 0.2, 0.2, 0.2],
            ),
            (
                spec(None, None, Some(vec![0.5, 0.3, 0.2])),
                vec![0.5, 0.3, 0.2, 0.0],
            ),
            (
                spec(Some(10), Some(0.1), None),
                [vec![0.1; 10], vec![0.0]].concat(),
            ),
        ] {
            let p = SharedPrefixes::new(&s, &mut rng).unwrap();
            assert_eq!(p.len() + 1, want.len());
            let n = 40_000;
            let mut seen = vec![0usize; want.len()];
            for _ in 0..n {
                let i = match p.draw(&mut rng) {
                    Some(t) => p.texts.iter().position(|x| x == t).unwrap(),
                    None => p.len(),
                };
                seen[i] += 1;
            }
            for (got, want) in seen.iter().zip(&want) {
                let got = *got as f64 / f64::from(n);
                // 4 standard deviations of a share of 40000 draws is under 0.01.
                assert!((got - want).abs() < 0.01, "{got} vs {want} in {seen:?}");
            }
            assert!(p.texts.iter().all(|t| t.split(' ').count() == 32));
            let distinct: std::collections::BTreeSet<&String> = p.texts.iter().collect();
            assert_eq!(distinct.len(), p.len());
        }
    }

    #[test]
    fn bad_shares_are_refused_in_one_line() {
        let mut rng = SmallRng::seed_from_u64(1);
        for (s, says) in [
            (spec(Some(4), Some(0.3), None), "add up to 1.200"),
            (
                spec(Some(4), None, None),
                "takes `prefixes` with `fraction`",
            ),
            (
                spec(Some(2), Some(0.5), Some(vec![0.5])),
                "takes `prefixes` with `fraction`",
            ),
            (spec(None, None, Some(vec![])), "needs 1..="),
            (spec(Some(0), Some(0.5), None), "must be 1..="),
            (
                spec(None, None, Some(vec![0.5, 0.0])),
                "share of 0 must be above 0",
            ),
            (spec(None, None, Some(vec![f64::NAN])), "share of NaN"),
        ] {
            let e = SharedPrefixes::new(&s, &mut rng).unwrap_err();
            assert!(e.contains(says), "{e}");
            assert!(!e.contains('\n'));
        }
        // Ten tenths add up to 1 within rounding.
        assert!(SharedPrefixes::new(&spec(Some(10), Some(0.1), None), &mut rng).is_ok());
        let long = SharedPrefixSpec {
            tokens: 0,
            ..spec(Some(1), Some(1.0), None)
        };
        assert!(
            SharedPrefixes::new(&long, &mut rng)
                .unwrap_err()
                .contains("tokens` 0")
        );
    }
}

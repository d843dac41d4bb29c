//! `--shard i/N`: one of N load-generator processes (pods of an Indexed Job) that together
//! produce a scenario's load. Shard `i` takes its share of every phase:
//!
//! - constant and ramp rates: every N-th arrival of the whole (deterministic) schedule,
//!   starting at arrival `i`, so the N schedules interleave into exactly the whole one;
//! - Poisson and gamma rates: an independent process at `rate / N` (independent Poisson
//!   processes add up to a Poisson process of the summed rate);
//! - trace replay: every N-th recorded arrival, starting at arrival `i`;
//! - closed-loop concurrency: `users / N` users each, the remainder going to the lowest shards.

use std::{fmt, str::FromStr};

use serde::{Deserialize, Serialize};

/// Shard `index` of `count` (0-based index).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Shard {
    /// Which shard, `0..count`.
    pub index: u32,
    /// How many shards share the load.
    pub count: u32,
}

/// A `--shard` value that is not `i/N` with `i < N`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--shard {0:?}: {1} (write i/N with 0 <= i < N, e.g. 0/4)")]
pub struct ShardError(String, &'static str);

impl FromStr for Shard {
    type Err = ShardError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |why| ShardError(s.to_owned(), why);
        let (i, n) = s.split_once('/').ok_or_else(|| bad("no `/`"))?;
        let index: u32 = i.trim().parse().map_err(|_| bad("i is not a number"))?;
        let count: u32 = n.trim().parse().map_err(|_| bad("N is not a number"))?;
        Self::new(index, count).map_err(|e| bad(e.1))
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl Shard {
    /// The whole load (shard 0 of 1).
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };

    /// Shard `index` of `count`, checked.
    pub fn new(index: u32, count: u32) -> Result<Self, ShardError> {
        let s = format!("{index}/{count}");
        if count == 0 {
            return Err(ShardError(s, "N must be at least 1"));
        }
        if index >= count {
            return Err(ShardError(s, "i must be smaller than N"));
        }
        Ok(Shard { index, count })
    }

    /// This shard's closed-loop users out of `users`: the remainder goes to the lowest shards.
    #[must_use]
    pub fn users(self, users: usize) -> usize {
        let n = self.count as usize;
        users / n + usize::from((self.index as usize) < users % n)
    }

    /// This shard's share of a mean rate.
    #[must_use]
    pub fn rate(self, rate: f64) -> f64 {
        rate / f64::from(self.count)
    }

    /// A seed for this shard: shards of a scenario with a fixed seed must not draw the
    /// same random schedule (their bursts would line up).
    #[must_use]
    pub fn seed(self, seed: u64) -> u64 {
        if self.count == 1 {
            seed
        } else {
            seed ^ u64::from(self.index + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_validates() {
        assert_eq!(
            "2/5".parse::<Shard>().unwrap(),
            Shard { index: 2, count: 5 }
        );
        assert_eq!("0/1".parse::<Shard>().unwrap(), Shard::WHOLE);
        for (bad, why) in [
            ("3/3", "i must be smaller than N"),
            ("0/0", "N must be at least 1"),
            ("1", "no `/`"),
            ("a/2", "i is not a number"),
            ("1/-2", "N is not a number"),
        ] {
            let e = bad.parse::<Shard>().unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
            assert!(e.contains("e.g. 0/4") && !e.contains('\n'), "{e}");
        }
        assert_eq!(Shard { index: 1, count: 4 }.to_string(), "1/4");
    }

    #[test]
    fn users_split_with_the_remainder_on_the_lowest_shards() {
        let split: Vec<usize> = (0..4)
            .map(|i| Shard::new(i, 4).unwrap().users(10))
            .collect();
        assert_eq!(split, [3, 3, 2, 2]);
        assert_eq!(Shard::new(2, 3).unwrap().users(1), 0);
        assert_eq!(Shard::WHOLE.users(7), 7);
    }
}

//! Requests sent within one prefill of an identical one, and the share chance gives.

use std::collections::{HashMap, HashSet};

use crate::measure::RequestRecord;

/// The requests sent within one prefill of an identical one (same `prompt_key`): a prefix
/// cache holds a prompt's blocks only once its prefill is done, so each of these computed the
/// same prefill again.
///
/// One prefill is the run's fastest send -> first token (its end, where no request streamed):
/// the time a first token takes when nothing waits. Never a prompt's own first token under
/// load, which holds the time it waited for admission: past a server's capacity every request
/// waits seconds, and a finite dataset repeats within seconds by chance (2,000 prompts at 80
/// req/s on the H200 read as a stampede). A prompt whose prefill is longer than the fastest
/// one's is undercounted, never a queue overcounted. Copies of a stampede are sent within
/// microseconds of each other.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Duplicates {
    /// The ids of the copies.
    pub ids: HashSet<u64>,
    /// One prefill, µs.
    pub prefill_us: u64,
    /// Distinct prompts among the requests read.
    pub distinct: usize,
}

impl Duplicates {
    /// The share of requests that chance alone gives a twin sent within one prefill before
    /// them, at `rate_per_s` LLM requests per second, each prompt drawn uniformly from the
    /// [`Self::distinct`] ones: `1 - exp(-rate x prefill / distinct)`. A generator that
    /// walks its dataset in order repeats less often than this; one fixed prompt repeats
    /// every request.
    #[must_use]
    pub fn chance(&self, rate_per_s: f64) -> f64 {
        if self.distinct == 0 || rate_per_s <= 0.0 {
            return 0.0;
        }
        let prefill_s = self.prefill_us as f64 / 1e6;
        1.0 - (-rate_per_s * prefill_s / self.distinct as f64).exp()
    }
}

/// See [`Duplicates`].
#[must_use]
pub fn duplicate_prefills(sent: impl IntoIterator<Item = Sent>) -> Duplicates {
    let mut by_key: HashMap<u64, Vec<Sent>> = HashMap::new();
    for s in sent {
        by_key.entry(s.key).or_default().push(s);
    }
    let all = || by_key.values().flatten();
    let streamed = all().filter(|s| s.streamed).map(|s| s.prefill_us).min();
    let prefill = streamed
        .or_else(|| all().map(|s| s.prefill_us).min())
        .unwrap_or(0);
    let mut out = Duplicates {
        ids: HashSet::new(),
        prefill_us: prefill,
        distinct: by_key.len(),
    };
    for mut twins in by_key.into_values().filter(|v| v.len() > 1) {
        twins.sort_unstable_by_key(|s| (s.at_us, s.prefill_us, s.id));
        for pair in twins.windows(2) {
            if pair[1].at_us < pair[0].at_us + prefill {
                out.ids.insert(pair[1].id);
            }
        }
    }
    out
}

/// An LLM request as `duplicate_prefills` reads it: its prompt, when it was sent, and how
/// long it took from there to its first token (to its end, without tokens).
#[derive(Debug, Clone, Copy)]
pub struct Sent {
    id: u64,
    key: u64,
    at_us: u64,
    prefill_us: u64,
    /// Whether it streamed a token (its `prefill_us` ends at a first token).
    streamed: bool,
}

impl Sent {
    /// `None` for a request without a `prompt_key` (not an LLM request).
    #[must_use]
    pub fn of(r: &RequestRecord) -> Option<Self> {
        let first = r.token_us.first().copied().unwrap_or(r.end_us);
        Some(Self {
            id: r.id,
            key: r.prompt_key?,
            at_us: r.actual_us,
            prefill_us: first.saturating_sub(r.actual_us),
            streamed: !r.token_us.is_empty(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::load::fold::tests::record;

    #[test]
    fn a_copy_sent_within_one_prefill_of_its_twin_duplicates_it() {
        let keyed = |id, at_ms, ttft_ms, key| {
            let mut r = record(id, 0, at_ms, ttft_ms, 3);
            r.prompt_key = Some(key);
            r
        };
        let records = [
            // A burst of three at 0 ms whose first tokens come at 100 ms, and the same prompt
            // alone at 150 ms, answered in 40 ms (one prefill): two duplicates.
            keyed(1, 0, 100, 7),
            keyed(2, 0, 100, 7),
            keyed(3, 0, 100, 7),
            keyed(4, 150, 40, 7),
            // Another prompt, at the same time: not one.
            keyed(5, 0, 100, 8),
            // No key (not an LLM request): never one.
            record(6, 0, 0, 100, 3),
        ];
        let dup = duplicate_prefills(records.iter().filter_map(Sent::of)).ids;
        assert_eq!(dup.len(), 2, "{dup:?}");
        assert!(!dup.contains(&4) && !dup.contains(&5) && !dup.contains(&6));
    }

    #[test]
    fn one_prompt_queued_at_a_steady_rate_is_no_duplicate() {
        // A fixed prompt every 125 ms on a server with two slots: each waits up to 400 ms
        // for its first token behind the others, but one prefill alone takes 20 ms and no two
        // were sent within it.
        let records: Vec<RequestRecord> = (0..10u64)
            .map(|i| {
                let mut r = record(i, 0, i * 125, if i == 0 { 20 } else { 400 }, 3);
                r.prompt_key = Some(7);
                r
            })
            .collect();
        assert!(
            duplicate_prefills(records.iter().filter_map(Sent::of))
                .ids
                .is_empty()
        );
    }

    /// The H200's overload without metrics: 2,000 prompts drawn at random at 80 req/s for 30 s,
    /// every first token 20-50 s away (waiting for admission), the run's fastest 117 ms. With
    /// the client's TTFT as the window 63% read as copies; within one prefill, the share is what
    /// chance gives, and nothing beyond it.
    #[test]
    fn a_finite_dataset_past_capacity_repeats_only_by_chance() {
        let mut seed: u64 = 7;
        let mut next = || {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            seed >> 33
        };
        let n = 2400u64;
        let records: Vec<RequestRecord> = (0..n)
            .map(|i| {
                let ttft = if i == 0 {
                    117
                } else {
                    20_000 + next() % 30_000
                };
                let mut r = record(i, 0, i * 1000 / 80, ttft, 3);
                r.prompt_key = Some(next() % 2000);
                r
            })
            .collect();
        let d = duplicate_prefills(records.iter().filter_map(Sent::of));
        assert_eq!(d.prefill_us, 116_500);
        let share = d.ids.len() as f64 / n as f64;
        let chance = d.chance(80.0);
        assert!(share < 0.02, "{share}");
        assert!(
            (share - chance).abs() < 0.01,
            "{share} against chance {chance}"
        );
    }

    /// One fixed prompt at a steady rate: every request has a twin by chance (the chance is ~1),
    /// so the copies beyond chance are none, whatever the window.
    #[test]
    fn one_fixed_prompt_is_all_chance() {
        let records: Vec<RequestRecord> = (0..50u64)
            .map(|i| {
                let mut r = record(i, 0, i * 10, 200, 3);
                r.prompt_key = Some(7);
                r
            })
            .collect();
        let d = duplicate_prefills(records.iter().filter_map(Sent::of));
        assert_eq!(d.distinct, 1);
        let share = d.ids.len() as f64 / 50.0;
        assert!(share > 0.9, "{share}");
        assert!(d.chance(100.0) > 0.99, "{}", d.chance(100.0));
    }
}

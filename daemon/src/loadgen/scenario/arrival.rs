//! Arrival schedules: absolute offsets from the phase start, produced lazily.
//!
//! As in vLLM's benchmark, every gap is drawn before the phase starts (and drawn again from
//! a copy of the generator as the phase runs, so memory stays O(1)) and the cumulative
//! sum is rescaled so that exactly `round(rate * duration)` requests land inside the
//! phase: the achieved rate cannot drift with the random seed, and the engine sleeps
//! until absolute deadlines, so a late wake-up never delays the requests after it.

use std::time::Duration;

use rand::Rng;
use rand_distr::{Distribution, Gamma};

use crate::measure::Shard;

/// The open-loop shapes (see `scenario::Load` for the YAML form).
#[derive(Debug, Clone, PartialEq)]
pub enum Arrival {
    /// Evenly spaced, `rate` per second.
    Constant(f64),
    /// Gamma-distributed gaps with mean `1/rate`; `burstiness` is the shape:
    /// 1 is Poisson, < 1 burstier, > 1 more regular.
    Gamma {
        /// Mean requests per second.
        rate: f64,
        /// Gamma shape parameter.
        burstiness: f64,
    },
    /// Rate rising (or falling) linearly from `from` to `to` over the phase.
    Ramp {
        /// Rate at the start, per second.
        from: f64,
        /// Rate at the end, per second.
        to: f64,
    },
    /// Replay of recorded offsets (already scaled by the replay speed).
    Trace(Vec<Duration>),
}

/// Offsets of every request of a phase of length `duration`, sorted, all `<= duration`,
/// collected. The engine iterates a [`Schedule`] instead, which holds O(1) memory.
pub fn schedule<R: Rng + Clone>(
    arrival: &Arrival,
    duration: Duration,
    rng: &mut R,
) -> Vec<Duration> {
    Schedule::new(arrival, duration, rng).collect()
}

/// A phase's arrival offsets, produced one at a time: the same sequence [`schedule`] collects,
/// in O(1) memory (a trace replays the offsets it already holds). `rng` is left where drawing
/// every gap up front leaves it, so whatever is drawn from it next does not change either.
#[derive(Debug, Clone)]
pub struct Schedule<R> {
    kind: Kind<R>,
    /// Arrivals of the whole schedule.
    n: usize,
    /// Index of the next arrival.
    pos: usize,
    /// Distance between the arrivals taken (a shard takes every N-th).
    step: usize,
    /// Phase length, seconds.
    d: f64,
}

#[derive(Debug, Clone)]
enum Kind<R> {
    Constant(f64),
    Gamma {
        gamma: Gamma<f64>,
        /// The generator as it was before the gaps were drawn: it draws them again.
        rng: R,
        acc: f64,
        scale: f64,
    },
    Ramp {
        from: f64,
        slope: f64,
    },
    Trace(Vec<Duration>),
}

impl<R: Rng + Clone> Schedule<R> {
    /// The schedule of `arrival` over `duration`. Gamma gaps are drawn here once to find the
    /// scale that makes the count exact (time O(n), memory O(1)), then drawn again, from a
    /// copy of the generator, as the offsets are taken.
    pub fn new(arrival: &Arrival, duration: Duration, rng: &mut R) -> Self {
        let d = duration.as_secs_f64();
        let (kind, n) = match arrival {
            Arrival::Constant(rate) => (Kind::Constant(*rate), (rate * d).round() as usize),
            Arrival::Gamma { rate, burstiness } => {
                let n = (rate * d).round() as usize;
                match Gamma::new(*burstiness, 1.0 / (rate * burstiness)) {
                    Ok(gamma) => {
                        let replay = rng.clone();
                        let mut acc = 0.0;
                        for _ in 0..n {
                            acc += gamma.sample(rng);
                        }
                        // Rescale so the last request lands at n / rate: the count is exact.
                        let scale = if acc > 0.0 {
                            (n as f64 / rate) / acc
                        } else {
                            0.0
                        };
                        let kind = Kind::Gamma {
                            gamma,
                            rng: replay,
                            acc: 0.0,
                            scale,
                        };
                        (kind, n)
                    }
                    Err(_) => (Kind::Constant(1.0), 0),
                }
            }
            Arrival::Ramp { from, to } => {
                // Cumulative arrivals L(t) = from*t + (to-from)*t^2/(2d); request i is at L^-1(i).
                let slope = (to - from) / d;
                let n = (from * d + slope * d * d / 2.0).round() as usize;
                (Kind::Ramp { from: *from, slope }, n)
            }
            Arrival::Trace(offsets) => {
                let kept: Vec<Duration> =
                    offsets.iter().copied().filter(|o| *o <= duration).collect();
                let n = kept.len();
                (Kind::Trace(kept), n)
            }
        };
        Self {
            kind,
            n,
            pos: 0,
            step: 1,
            d,
        }
    }

    /// Only every `count`-th arrival, starting at arrival `index` (a shard's share of a
    /// deterministic schedule; see `shard`).
    #[must_use]
    pub fn every_nth(mut self, index: usize, count: usize) -> Self {
        self.pos = index;
        self.step = count.max(1);
        self
    }

    /// Index, in the whole schedule, of the arrival [`Iterator::next`] gave last (a shard's
    /// arrivals are every N-th of the whole): a trace's row that arrival replays.
    #[must_use]
    pub fn taken(&self) -> usize {
        self.pos.saturating_sub(self.step)
    }

    /// Arrivals not taken yet.
    #[must_use]
    pub fn remaining(&self) -> usize {
        self.n.saturating_sub(self.pos).div_ceil(self.step)
    }
}

impl<R: Rng> Iterator for Schedule<R> {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        if self.pos >= self.n {
            return None;
        }
        let i = self.pos;
        self.pos += self.step;
        let d = self.d;
        Some(match &mut self.kind {
            Kind::Constant(rate) => Duration::from_secs_f64(i as f64 / *rate),
            // A gamma schedule is never sharded (step 1), so the draws stay in order.
            Kind::Gamma {
                gamma,
                rng,
                acc,
                scale,
            } => {
                *acc += gamma.sample(rng);
                Duration::from_secs_f64((*acc * *scale).min(d))
            }
            Kind::Ramp { from, slope } => {
                let (from, slope, i) = (*from, *slope, i as f64);
                let t = if slope.abs() < 1e-12 {
                    i / from
                } else {
                    (-from + (from * from + 2.0 * slope * i).max(0.0).sqrt()) / slope
                };
                Duration::from_secs_f64(t.clamp(0.0, d))
            }
            Kind::Trace(offsets) => offsets[i],
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.n.saturating_sub(self.pos).div_ceil(self.step);
        (left, Some(left))
    }
}

/// Coefficient of variation (std dev / mean) of the gaps between sorted offsets.
#[must_use]
pub fn gap_cv(offsets: &[f64]) -> f64 {
    let gaps: Vec<f64> = offsets.windows(2).map(|w| w[1] - w[0]).collect();
    if gaps.is_empty() {
        return 0.0;
    }
    let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
    let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
    if mean > 0.0 { var.sqrt() / mean } else { 0.0 }
}

/// A shard's part of a phase's arrivals (see [`Shard`]): deterministic schedules are
/// interleaved so the shards' union is exactly the whole; random ones divide the rate.
impl Shard {
    /// This shard's arrival offsets for a phase of length `duration` (see the module doc),
    /// produced lazily.
    pub fn schedule<R: Rng + Clone>(
        self,
        a: &Arrival,
        duration: Duration,
        rng: &mut R,
    ) -> Schedule<R> {
        let n = f64::from(self.count);
        match a {
            // Deterministic schedules: interleave the whole one, so the union is exact.
            Arrival::Constant(_) | Arrival::Ramp { .. } | Arrival::Trace(_) => {
                Schedule::new(a, duration, rng).every_nth(self.index as usize, self.count as usize)
            }
            Arrival::Gamma { rate, burstiness } => Schedule::new(
                &Arrival::Gamma {
                    rate: rate / n,
                    burstiness: *burstiness,
                },
                duration,
                rng,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loadgen::scenario::arrival;
    use rand::{RngCore as _, SeedableRng, rngs::SmallRng};

    fn secs(v: &[Duration]) -> Vec<f64> {
        v.iter().map(Duration::as_secs_f64).collect()
    }

    #[test]
    fn counts_are_exact_and_sorted() {
        let mut rng = SmallRng::seed_from_u64(7);
        let d = Duration::from_secs(10);
        for a in [
            Arrival::Constant(20.0),
            Arrival::Gamma {
                rate: 20.0,
                burstiness: 1.0,
            },
            Arrival::Gamma {
                rate: 20.0,
                burstiness: 0.2,
            },
        ] {
            let s = schedule(&a, d, &mut rng);
            assert_eq!(s.len(), 200, "{a:?}");
            assert!(s.windows(2).all(|w| w[0] <= w[1]));
            assert!(*s.last().unwrap() <= d);
        }
    }

    #[test]
    fn burstiness_orders_the_gap_variation() {
        let mut rng = SmallRng::seed_from_u64(9);
        let d = Duration::from_secs(100);
        let cv = |a: Arrival, rng: &mut SmallRng| gap_cv(&secs(&schedule(&a, d, rng)));
        let constant = cv(Arrival::Constant(50.0), &mut rng);
        let poisson = cv(
            Arrival::Gamma {
                rate: 50.0,
                burstiness: 1.0,
            },
            &mut rng,
        );
        let bursty = cv(
            Arrival::Gamma {
                rate: 50.0,
                burstiness: 0.25,
            },
            &mut rng,
        );
        assert!(constant < 1e-6, "{constant}");
        assert!((poisson - 1.0).abs() < 0.1, "{poisson}");
        assert!(bursty > 1.6, "{bursty}");
    }

    #[test]
    fn ramp_rises_linearly() {
        let mut rng = SmallRng::seed_from_u64(1);
        let s = secs(&schedule(
            &Arrival::Ramp {
                from: 10.0,
                to: 30.0,
            },
            Duration::from_secs(10),
            &mut rng,
        ));
        assert_eq!(s.len(), 200);
        let first_half = s.iter().filter(|t| **t < 5.0).count();
        // L(5) = 50 + 25 = 75 of 200.
        assert!((74..=76).contains(&first_half), "{first_half}");
    }

    /// The schedule as it was computed before it became lazy: every offset in a Vec.
    fn eager(arrival: &Arrival, duration: Duration, rng: &mut SmallRng) -> Vec<Duration> {
        let d = duration.as_secs_f64();
        match arrival {
            Arrival::Constant(rate) => {
                let n = (rate * d).round() as usize;
                (0..n)
                    .map(|i| Duration::from_secs_f64(i as f64 / rate))
                    .collect()
            }
            Arrival::Gamma { rate, burstiness } => {
                let n = (rate * d).round() as usize;
                let gamma = Gamma::new(*burstiness, 1.0 / (rate * burstiness)).unwrap();
                let mut acc = 0.0;
                let cum: Vec<f64> = (0..n)
                    .map(|_| {
                        acc += gamma.sample(rng);
                        acc
                    })
                    .collect();
                let scale = if acc > 0.0 {
                    (n as f64 / rate) / acc
                } else {
                    0.0
                };
                cum.iter()
                    .map(|c| Duration::from_secs_f64((c * scale).min(d)))
                    .collect()
            }
            Arrival::Ramp { from, to } => {
                let slope = (to - from) / d;
                let n = (from * d + slope * d * d / 2.0).round() as usize;
                (0..n)
                    .map(|i| {
                        let i = i as f64;
                        let t = if slope.abs() < 1e-12 {
                            i / from
                        } else {
                            (-from + (from * from + 2.0 * slope * i).max(0.0).sqrt()) / slope
                        };
                        Duration::from_secs_f64(t.clamp(0.0, d))
                    })
                    .collect()
            }
            Arrival::Trace(o) => o.iter().copied().filter(|o| *o <= duration).collect(),
        }
    }

    #[test]
    fn the_lazy_schedule_is_the_eager_one_and_leaves_the_generator_alike() {
        let d = Duration::from_secs(37);
        let trace = Arrival::Trace(
            [0.0, 0.5, 40.0, 1.25, 36.9]
                .iter()
                .map(|s| Duration::from_secs_f64(*s))
                .collect(),
        );
        for seed in [0, 1, 42, 0xdead_beef] {
            for a in [
                Arrival::Constant(33.3),
                Arrival::Gamma {
                    rate: 120.0,
                    burstiness: 1.0,
                },
                Arrival::Gamma {
                    rate: 7.5,
                    burstiness: 0.3,
                },
                Arrival::Ramp {
                    from: 10.0,
                    to: 95.0,
                },
                Arrival::Ramp {
                    from: 80.0,
                    to: 5.0,
                },
                trace.clone(),
            ] {
                let (mut r1, mut r2) =
                    (SmallRng::seed_from_u64(seed), SmallRng::seed_from_u64(seed));
                let old = eager(&a, d, &mut r1);
                let lazy = Schedule::new(&a, d, &mut r2);
                assert_eq!(lazy.remaining(), old.len(), "{a:?}");
                let new: Vec<Duration> = lazy.collect();
                assert_eq!(new, old, "{a:?} seed {seed}");
                // What the engine draws next (prompts, sampling) is unchanged too.
                assert_eq!(r1.next_u64(), r2.next_u64(), "{a:?} seed {seed}");
            }
        }
        // Sharded: every 3rd, from the 2nd, with an exact remaining count.
        let mut rng = SmallRng::seed_from_u64(5);
        let whole = schedule(&Arrival::Constant(10.0), Duration::from_secs(10), &mut rng);
        let mut part = Schedule::new(&Arrival::Constant(10.0), Duration::from_secs(10), &mut rng)
            .every_nth(1, 3);
        assert_eq!(part.remaining(), 33);
        assert_eq!(part.next(), Some(whole[1]));
        assert_eq!(part.taken(), 1);
        assert_eq!(part.remaining(), 32);
        assert_eq!(part.next(), Some(whole[4]));
        assert_eq!(part.taken(), 4);
        assert_eq!(
            part.collect::<Vec<_>>().last(),
            whole.iter().skip(1).step_by(3).next_back()
        );
    }

    #[test]
    fn a_long_fast_schedule_holds_no_memory() {
        // A day at the hard cap: 17 billion arrivals, never materialised.
        let mut rng = SmallRng::seed_from_u64(1);
        let mut s = Schedule::new(
            &Arrival::Constant(200_000.0),
            Duration::from_hours(24),
            &mut rng,
        );
        assert_eq!(s.remaining(), 17_280_000_000);
        assert_eq!(s.nth(1_000_000), Some(Duration::from_secs(5)));
        assert!(std::mem::size_of_val(&s) < 256);
    }

    #[test]
    fn deterministic_schedules_interleave_into_the_whole() {
        let mut rng = SmallRng::seed_from_u64(1);
        let d = Duration::from_secs(3);
        for a in [
            Arrival::Constant(10.0),
            Arrival::Ramp {
                from: 2.0,
                to: 20.0,
            },
            Arrival::Trace((0..31).map(|i| Duration::from_millis(i * 90)).collect()),
        ] {
            let whole = arrival::schedule(&a, d, &mut rng);
            let mut union: Vec<Duration> = (0..3)
                .flat_map(|i| Shard::new(i, 3).unwrap().schedule(&a, d, &mut rng))
                .collect();
            union.sort();
            assert_eq!(union, whole, "{a:?}");
            let mut first = Shard::new(1, 3).unwrap().schedule(&a, d, &mut rng);
            assert_eq!(first.next(), Some(whole[1]));
        }
    }

    #[test]
    fn random_rates_are_divided() {
        let mut rng = SmallRng::seed_from_u64(7);
        let a = Arrival::Gamma {
            rate: 90.0,
            burstiness: 1.0,
        };
        let s = Shard::new(2, 3).unwrap();
        let offs = s.schedule(&a, Duration::from_secs(10), &mut rng);
        assert_eq!(offs.count(), 300);
        assert!((s.rate(90.0) - 30.0).abs() < 1e-12);
        assert_ne!(s.seed(5), Shard::new(1, 3).unwrap().seed(5));
        assert_eq!(Shard::WHOLE.seed(5), 5);
    }
}

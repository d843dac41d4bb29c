//! `ramp_up:` of a closed-loop phase: its users (and their connections) start spread over
//! the ramp instead of at one instant, so the phase does not open with a connect storm whose
//! first requests read as a latency tail the server under steady load does not have.
//!
//! Written `ramp_up: 10s` (linear, ramp requests left out of the percentiles) or
//! `ramp_up: {duration: 10s, strategy: exponential, count: true}`. `ramp_up: 0s` turns the
//! default ramp of large user counts ([`default_for`]) off.

use std::{fmt, time::Duration};

use serde::{
    Deserialize, Deserializer,
    de::{self, MapAccess, Visitor},
};

use super::limits::parse_duration;

/// From this many users on, a closed-loop phase without `ramp_up:` gets [`default_for`]'s.
pub const DEFAULT_FROM_USERS: usize = 500;
/// Users the default ramp starts per second.
pub const DEFAULT_USERS_PER_S: f64 = 1000.0;
/// The default ramp takes at most this share of its phase.
pub const DEFAULT_MAX_SHARE: f64 = 0.25;

/// How users are spread over the ramp (vLLM's `--ramp-up-strategy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// The same number of users start in every instant of the ramp.
    #[default]
    Linear,
    /// The users started double in equal steps: one at the start, all of them at its end.
    Exponential,
}

impl Strategy {
    /// The name in scenarios and reports.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Linear => "linear",
            Self::Exponential => "exponential",
        }
    }
}

/// A phase's `ramp_up:`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RampUp {
    /// How long until the last user has started; zero for none.
    pub duration: Duration,
    /// How the starts are spread.
    pub strategy: Strategy,
    /// Whether requests started during the ramp count in the phase's percentiles (default
    /// false: they are reported apart).
    pub count: bool,
}

impl RampUp {
    /// A linear ramp of `duration` whose requests are reported apart.
    #[must_use]
    pub fn linear(duration: Duration) -> Self {
        Self {
            duration,
            strategy: Strategy::Linear,
            count: false,
        }
    }

    /// When user `k` of `n` (0-based) starts, after the phase's start. Linear: `T * k / n`;
    /// exponential: `T * ln(k + 1) / ln(n)`, so that the users started grow by a constant
    /// factor per unit of time, from 1 at the start to `n` at `T`.
    #[must_use]
    pub fn start_of(&self, k: usize, n: usize) -> Duration {
        if n <= 1 || self.duration.is_zero() {
            return Duration::ZERO;
        }
        let share = match self.strategy {
            Strategy::Linear => k as f64 / n as f64,
            Strategy::Exponential => ((k + 1) as f64).ln() / (n as f64).ln(),
        };
        self.duration.mul_f64(share.clamp(0.0, 1.0))
    }

    /// What is wrong with this ramp on a phase of `duration` with `users` (closed loop) or
    /// `None` users (open loop), if anything.
    #[must_use]
    pub fn problem(&self, duration: Duration, users: Option<usize>) -> Option<String> {
        if users.is_none() && !self.duration.is_zero() {
            return Some(
                "`ramp_up` starts the users of a closed loop (`shape: concurrency`); an open-loop rate ramps with `shape: ramp, from: A, to: B`".into(),
            );
        }
        if self.duration >= duration {
            return Some(format!(
                "`ramp_up: {}` must be shorter than the phase's duration ({}): the phase's percentiles are taken after it",
                humantime::format_duration(self.duration),
                humantime::format_duration(duration)
            ));
        }
        None
    }
}

/// The ramp of a closed-loop phase of `users` users and `duration` that sets none: from
/// [`DEFAULT_FROM_USERS`] users on, [`DEFAULT_USERS_PER_S`] users a second, at most
/// [`DEFAULT_MAX_SHARE`] of the phase, linear, its requests reported apart; `None` below.
#[must_use]
pub fn default_for(users: usize, duration: Duration) -> Option<RampUp> {
    if users < DEFAULT_FROM_USERS {
        return None;
    }
    let secs = (users as f64 / DEFAULT_USERS_PER_S).min(duration.as_secs_f64() * DEFAULT_MAX_SHARE);
    // Whole milliseconds, so the note and the report read cleanly.
    let ms = (secs * 1e3).round() as u64;
    (ms > 0).then(|| RampUp::linear(Duration::from_millis(ms)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Full {
    #[serde(deserialize_with = "super::limits::de_duration")]
    duration: Duration,
    #[serde(default)]
    strategy: Strategy,
    #[serde(default)]
    count: bool,
}

impl<'de> Deserialize<'de> for RampUp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RampUp;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as `10s`, or `{duration: 10s, strategy: linear|exponential, count: false}`")
            }

            fn visit_str<E: de::Error>(self, s: &str) -> Result<RampUp, E> {
                parse_duration(s).map(RampUp::linear).map_err(|e| {
                    E::custom(format!(
                        "{e}; the long form is `{{duration: 10s, strategy: exponential}}`"
                    ))
                })
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RampUp, A::Error> {
                let f = Full::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(RampUp {
                    duration: f.duration,
                    strategy: f.strategy,
                    count: f.count,
                })
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S10: Duration = Duration::from_secs(10);

    #[test]
    fn linear_spreads_users_evenly_and_exponential_doubles() {
        let lin = RampUp::linear(S10);
        let starts: Vec<f64> = (0..4).map(|k| lin.start_of(k, 4).as_secs_f64()).collect();
        assert_eq!(starts, vec![0.0, 2.5, 5.0, 7.5]);
        let exp = RampUp {
            strategy: Strategy::Exponential,
            ..lin
        };
        // 1 user at 0, 2 by T/3, 4 by 2T/3, 8 by T: the started users double each third.
        let at = |k| exp.start_of(k, 8).as_secs_f64();
        assert!(at(0).abs() < 1e-9);
        assert!((at(1) - 10.0 / 3.0).abs() < 1e-6, "{}", at(1));
        assert!((at(3) - 20.0 / 3.0).abs() < 1e-6, "{}", at(3));
        assert!((at(7) - 10.0).abs() < 1e-6, "{}", at(7));
        assert!(at(4) < at(5) && at(5) < at(6));
        assert_eq!(exp.start_of(0, 1), Duration::ZERO);
    }

    #[test]
    fn large_user_counts_get_a_default_ramp_within_a_quarter_of_the_phase() {
        assert_eq!(default_for(499, S10), None);
        assert_eq!(
            default_for(1000, Duration::from_secs(20)),
            Some(RampUp::linear(Duration::from_secs(1)))
        );
        // 10,000 users would take 10 s; a 20 s phase gives the ramp 5 s at most.
        assert_eq!(
            default_for(10_000, Duration::from_secs(20)),
            Some(RampUp::linear(Duration::from_secs(5)))
        );
    }

    #[test]
    fn reads_the_short_and_the_full_form() {
        let r: RampUp = serde_norway::from_str("10s").unwrap();
        assert_eq!(r, RampUp::linear(S10));
        let r: RampUp =
            serde_norway::from_str("{duration: 2s, strategy: exponential, count: true}").unwrap();
        assert_eq!(r.strategy, Strategy::Exponential);
        assert!(r.count);
        let e = serde_norway::from_str::<RampUp>("{duration: 2s, strategy: log}")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown variant `log`"), "{e}");
        let e = serde_norway::from_str::<RampUp>("{duration: 2s, users: 3}")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `users`"), "{e}");
        assert!(serde_norway::from_str::<RampUp>("ten").is_err());
    }

    #[test]
    fn a_ramp_must_fit_its_closed_loop_phase() {
        let r = RampUp::linear(S10);
        assert_eq!(r.problem(Duration::from_secs(30), Some(10)), None);
        let e = r.problem(S10, Some(10)).unwrap();
        assert!(e.contains("shorter than the phase's duration"), "{e}");
        let e = r.problem(Duration::from_secs(30), None).unwrap();
        assert!(e.contains("closed loop"), "{e}");
        // `ramp_up: 0s` (no ramp) is fine anywhere.
        assert_eq!(RampUp::linear(Duration::ZERO).problem(S10, None), None);
    }
}

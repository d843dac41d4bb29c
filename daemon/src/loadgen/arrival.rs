//! Arrival schedules, computed up front as absolute offsets from the phase start.
//!
//! As in vLLM's benchmark, every gap is drawn before the phase starts and the cumulative
//! sum is rescaled so that exactly `round(rate * duration)` requests land inside the
//! phase: the achieved rate cannot drift with the random seed, and the engine sleeps
//! until absolute deadlines, so a late wake-up never delays the requests after it.

use std::time::Duration;

use rand::Rng;
use rand_distr::{Distribution, Gamma};

use super::limits::HARD_MAX_DURATION;

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

/// Offsets of every request of a phase of length `duration`, sorted, all `<= duration`.
pub fn schedule<R: Rng>(arrival: &Arrival, duration: Duration, rng: &mut R) -> Vec<Duration> {
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
            let Ok(gamma) = Gamma::new(*burstiness, 1.0 / (rate * burstiness)) else {
                return Vec::new();
            };
            let mut acc = 0.0;
            let cum: Vec<f64> = (0..n)
                .map(|_| {
                    acc += gamma.sample(rng);
                    acc
                })
                .collect();
            // Rescale so the last request lands at n / rate: the count is exact.
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
            // Cumulative arrivals L(t) = from*t + (to-from)*t^2/(2d); request i is at L^-1(i).
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
        Arrival::Trace(offsets) => offsets.iter().copied().filter(|o| *o <= duration).collect(),
    }
}

/// Parses a trace file: one arrival per line, either a number (seconds) or a JSON object
/// with `timestamp` (seconds) or `timestamp_ms`. Offsets are relative to the first one.
pub fn parse_trace(text: &str, speed: f64) -> Result<Vec<Duration>, (usize, String)> {
    let mut ts = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let secs = if let Ok(v) = line.parse::<f64>() {
            v
        } else {
            let v: serde_json::Value = serde_json::from_str(line)
                .map_err(|e| (i + 1, format!("neither a number nor JSON: {e}")))?;
            if let Some(s) = v.get("timestamp").and_then(serde_json::Value::as_f64) {
                s
            } else if let Some(ms) = v.get("timestamp_ms").and_then(serde_json::Value::as_f64) {
                ms / 1000.0
            } else {
                return Err((i + 1, "expected `timestamp` (s) or `timestamp_ms`".into()));
            }
        };
        if !secs.is_finite() {
            return Err((i + 1, "timestamp is not finite".into()));
        }
        ts.push((secs, i + 1));
    }
    ts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let first = ts.first().map_or(0.0, |t| t.0);
    ts.iter()
        .map(|&(t, line)| {
            // A huge gap (or a tiny speed) must be an error, not a Duration overflow.
            Duration::try_from_secs_f64((t - first) / speed)
                .ok()
                .filter(|d| *d <= HARD_MAX_DURATION)
                .ok_or_else(|| {
                    (
                        line,
                        format!(
                            "timestamp {t} is more than 7 days (at speed {speed}) after the first one"
                        ),
                    )
                })
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{SeedableRng, rngs::SmallRng};

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

    #[test]
    fn trace_parsing() {
        let t = parse_trace(
            "# comment\n10.5\n{\"timestamp\": 10}\n{\"timestamp_ms\": 12000}\n",
            2.0,
        )
        .unwrap();
        assert_eq!(secs(&t), [0.0, 0.25, 1.0]);
        assert_eq!(parse_trace("1\nxx\n", 1.0).unwrap_err().0, 2);
        // A gap beyond any phase names its line instead of overflowing a Duration.
        let e = parse_trace("0\n1e300\n5\n", 1.0).unwrap_err();
        assert_eq!(e.0, 2, "{e:?}");
        assert!(e.1.contains("7 days"), "{e:?}");
        assert_eq!(parse_trace("0\n1\n", 1e-300).unwrap_err().0, 2);
    }
}

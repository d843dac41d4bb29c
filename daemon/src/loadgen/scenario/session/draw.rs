//! What a session draws per call: token counts (fixed or `[min, max]`) and waits (constant,
//! uniform, exponential, lognormal), as written and as drawn.

use std::time::Duration;

use rand::Rng;
use rand_distr::{Distribution, Exp, LogNormal};
use serde::Deserialize;
use serde_json::Value;

use crate::loadgen::scenario::limits::parse_duration;

/// Most tokens of one made-up text (system prompt, task, tool result, summary).
pub const MAX_TOKENS: u32 = 1_000_000;
/// Longest wait one draw gives (a lognormal's tail is unbounded).
pub const MAX_WAIT: Duration = Duration::from_hours(1);

/// A token count: fixed, or drawn uniformly from `[min, max]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "Value")]
pub struct Tokens {
    /// Least.
    pub min: u32,
    /// Most.
    pub max: u32,
}

impl TryFrom<Value> for Tokens {
    type Error = String;

    fn try_from(v: Value) -> Result<Self, String> {
        let n = |x: &Value| {
            x.as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .filter(|n| (1..=MAX_TOKENS).contains(n))
        };
        let (min, max) = match &v {
            Value::Array(a) if a.len() == 2 => (n(&a[0]), n(&a[1])),
            x => (n(x), n(x)),
        };
        match (min, max) {
            (Some(min), Some(max)) if min <= max => Ok(Self { min, max }),
            _ => Err(format!(
                "bad token count `{v}`: write a number 1..={MAX_TOKENS} or `[min, max]`"
            )),
        }
    }
}

impl Tokens {
    /// One draw.
    pub fn draw<R: Rng>(self, rng: &mut R) -> u32 {
        rng.random_range(self.min..=self.max)
    }
}

/// A wait drawn from a distribution: `300ms` (constant), `{uniform: [100ms, 1s]}`,
/// `{exponential: 300ms}` (its mean), `{lognormal: {median: 300ms, sigma: 0.6}}`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(try_from = "Value")]
pub enum Wait {
    /// Always this long.
    Constant(Duration),
    /// Uniform between the two.
    Uniform(Duration, Duration),
    /// Exponential with this mean.
    Exponential(Duration),
    /// Lognormal with this median and shape `sigma` (of the underlying normal).
    LogNormal {
        /// The median.
        median: Duration,
        /// The shape.
        sigma: f64,
    },
}

impl TryFrom<Value> for Wait {
    type Error = String;

    fn try_from(v: Value) -> Result<Self, String> {
        let how = "write `300ms`, `{uniform: [100ms, 1s]}`, `{exponential: 300ms}` or `{lognormal: {median: 300ms, sigma: 0.6}}`";
        let dur = |x: &Value| -> Result<Duration, String> {
            x.as_str()
                .ok_or_else(|| format!("bad wait `{v}`: {how}"))
                .and_then(parse_duration)
        };
        let Value::Object(m) = &v else {
            return dur(&v).map(Self::Constant);
        };
        let (Some((kind, arg)), 1) = (m.iter().next(), m.len()) else {
            return Err(format!("bad wait `{v}`: {how}"));
        };
        match kind.as_str() {
            "constant" => dur(arg).map(Self::Constant),
            "uniform" => match arg.as_array().map(Vec::as_slice) {
                Some([a, b]) => {
                    let (a, b) = (dur(a)?, dur(b)?);
                    if a > b {
                        return Err(format!("uniform wait `{v}`: the first bound is the lower"));
                    }
                    Ok(Self::Uniform(a, b))
                }
                _ => Err(format!("bad wait `{v}`: {how}")),
            },
            "exponential" => dur(arg).map(Self::Exponential),
            "lognormal" => {
                let median = dur(&arg["median"])?;
                let sigma = arg["sigma"].as_f64().filter(|s| (0.0..=10.0).contains(s));
                match (sigma, arg.as_object().map(serde_json::Map::len)) {
                    (Some(sigma), Some(2)) => Ok(Self::LogNormal { median, sigma }),
                    _ => Err(format!(
                        "bad lognormal wait `{v}`: it takes `median` (a duration) and `sigma` (0..=10)"
                    )),
                }
            }
            other => Err(format!("unknown wait distribution `{other}`: {how}")),
        }
    }
}

impl Wait {
    /// One draw, at most [`MAX_WAIT`].
    pub fn draw<R: Rng>(self, rng: &mut R) -> Duration {
        let secs = match self {
            Self::Constant(d) => return d.min(MAX_WAIT),
            Self::Uniform(a, b) => rng.random_range(a.as_secs_f64()..=b.as_secs_f64()),
            Self::Exponential(mean) => match Exp::new(1.0 / mean.as_secs_f64()) {
                Ok(e) => e.sample(rng),
                // A zero mean: every draw is zero.
                Err(_) => 0.0,
            },
            Self::LogNormal { median, sigma } => {
                let mu = median.as_secs_f64().max(1e-9).ln();
                LogNormal::new(mu, sigma).map_or(0.0, |d| d.sample(rng))
            }
        };
        Duration::try_from_secs_f64(secs).map_or(MAX_WAIT, |d| d.min(MAX_WAIT))
    }
}

//! Load shapes of a phase: `load: {shape: poisson, rate: 20}` and friends.

use std::{path::PathBuf, sync::Arc, time::Duration};

use serde::Deserialize;

use crate::loadgen::scenario::{
    HARD_MAX_RATE, arrival,
    limits::{BURSTINESS, de_duration},
    replay::{Replay, TraceFormat},
    trace::{MOONCAKE_BLOCK_SIZE, TraceSpec, Window},
    words::MAX_SYNTHETIC_PROMPT_WORDS,
};
use crate::measure::prefix::PrefixSharing;

/// Load shapes, written `load: {shape: poisson, rate: 20}`. Open-loop shapes take
/// requests per second; `concurrency` is closed loop.
#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "LoadRaw")]
pub enum Load {
    /// `shape: constant, rate: R`: evenly spaced arrivals.
    Constant {
        /// Requests per second.
        rate: f64,
    },
    /// `shape: poisson, rate: R`: exponential gaps.
    Poisson {
        /// Mean requests per second.
        rate: f64,
    },
    /// `shape: gamma, rate: R, burstiness: B`: B < 1 burstier than Poisson, > 1 smoother.
    Gamma {
        /// Mean requests per second.
        rate: f64,
        /// Gamma shape.
        burstiness: f64,
    },
    /// `shape: ramp, from: A, to: B`: rate rising linearly over the phase.
    Ramp {
        /// Start rate.
        from: f64,
        /// End rate.
        to: f64,
    },
    /// `shape: trace, path: FILE, speed: S`: replay of a trace file, relative to the scenario
    /// file (see `trace.rs`): its arrivals, and with `format: mooncake` what each row sends;
    /// `window: {from, until}` keeps a span of the trace's clock.
    Trace {
        /// Trace file.
        path: PathBuf,
        /// Its format, speed, window and block size.
        spec: TraceSpec,
        /// Offsets read from the file (filled when the scenario becomes a [`crate::loadgen::Plan`]).
        offsets: Vec<Duration>,
        /// `format: mooncake`: what arrival i sends (filled with `offsets`).
        replay: Option<Arc<Replay>>,
    },
    /// `shape: concurrency, users: N`: closed loop, each user sends its next request when
    /// the last one ends.
    Concurrency {
        /// Number of concurrent users (connections).
        users: usize,
    },
    /// `complexity_shaping: true` on an open-loop shape (constant, poisson, gamma, ramp): the
    /// gap before each request is stretched by its prompt's complexity score, so its
    /// effective rate is `base * 0.75^(score/20)` (see `loadgen::engine::complexity`). Never wraps
    /// a trace, concurrency or another `Shaped`.
    Shaped(Box<Load>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LoadRaw {
    shape: String,
    rate: Option<f64>,
    burstiness: Option<f64>,
    from: Option<f64>,
    to: Option<f64>,
    path: Option<PathBuf>,
    speed: Option<f64>,
    format: Option<TraceFormat>,
    window: Option<WindowRaw>,
    block_size: Option<u32>,
    users: Option<usize>,
    complexity_shaping: Option<bool>,
}

/// `window: {from: 10m, until: 20m}` of a trace.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WindowRaw {
    #[serde(default, deserialize_with = "de_opt_offset")]
    from: Option<Duration>,
    #[serde(default, deserialize_with = "de_opt_offset")]
    until: Option<Duration>,
}

fn de_opt_offset<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    de_duration(d).map(Some)
}

impl TryFrom<WindowRaw> for Window {
    type Error = String;

    fn try_from(w: WindowRaw) -> Result<Self, String> {
        let from = w.from.unwrap_or_default();
        if let Some(until) = w.until
            && until <= from
        {
            return Err(format!(
                "`window` ends at {} before it starts at {}: `until` must be after `from`",
                humantime::format_duration(until),
                humantime::format_duration(from)
            ));
        }
        Ok(Window {
            from,
            until: w.until,
        })
    }
}

impl TryFrom<LoadRaw> for Load {
    type Error = String;

    fn try_from(r: LoadRaw) -> Result<Self, String> {
        let rate_ok = |name: &str, v: Option<f64>| match v {
            Some(v) if v > 0.0 && v <= HARD_MAX_RATE => Ok(v),
            Some(v) => Err(format!(
                "`{name}: {v}` must be > 0 and <= {HARD_MAX_RATE} requests/s"
            )),
            None => Err(format!("shape `{}` needs `{name}:` (requests/s)", r.shape)),
        };
        let given: Vec<&str> = [
            ("rate", r.rate.is_some()),
            ("burstiness", r.burstiness.is_some()),
            ("from", r.from.is_some()),
            ("to", r.to.is_some()),
            ("path", r.path.is_some()),
            ("speed", r.speed.is_some()),
            ("format", r.format.is_some()),
            ("window", r.window.is_some()),
            ("block_size", r.block_size.is_some()),
            ("users", r.users.is_some()),
        ]
        .iter()
        .filter_map(|(n, g)| g.then_some(*n))
        .collect();
        let allowed: &[&str] = match r.shape.as_str() {
            "constant" | "poisson" => &["rate"],
            "gamma" => &["rate", "burstiness"],
            "ramp" => &["from", "to"],
            "trace" => &["path", "speed", "format", "window", "block_size"],
            "concurrency" => &["users"],
            other => {
                return Err(format!(
                    "unknown shape `{other}`: use constant, poisson, gamma, ramp, trace or concurrency"
                ));
            }
        };
        if let Some(extra) = given.iter().find(|g| !allowed.contains(g)) {
            return Err(format!(
                "shape `{}` does not take `{extra}` (it takes: {})",
                r.shape,
                allowed.join(", ")
            ));
        }
        let load = match r.shape.as_str() {
            "constant" => Load::Constant {
                rate: rate_ok("rate", r.rate)?,
            },
            "poisson" => Load::Poisson {
                rate: rate_ok("rate", r.rate)?,
            },
            "gamma" => Load::Gamma {
                rate: rate_ok("rate", r.rate)?,
                burstiness: r
                    .burstiness
                    .filter(|b| (BURSTINESS.0..=BURSTINESS.1).contains(b))
                    .ok_or("shape `gamma` needs `burstiness:` in 0.001..=1000 (1 = Poisson)")?,
            },
            "ramp" => Load::Ramp {
                from: rate_ok("from", r.from)?,
                to: rate_ok("to", r.to)?,
            },
            "trace" => Load::Trace {
                path: r
                    .path
                    .ok_or("shape `trace` needs `path:` (a file of timestamps)")?,
                spec: trace_spec(r.speed, r.format, r.window, r.block_size)?,
                offsets: Vec::new(),
                replay: None,
            },
            _ => Load::Concurrency {
                users: r.users.ok_or("shape `concurrency` needs `users:`")?,
            },
        };
        match (r.complexity_shaping, &load) {
            (Some(true), Load::Trace { .. } | Load::Concurrency { .. }) => Err(format!(
                "shape `{}` does not take `complexity_shaping` (a trace replays recorded times and a closed loop has no gaps): use constant, poisson, gamma or ramp",
                r.shape
            )),
            (Some(true), _) => Ok(Load::Shaped(Box::new(load))),
            _ => Ok(load),
        }
    }
}

/// A trace's replay settings from its fields.
fn trace_spec(
    speed: Option<f64>,
    format: Option<TraceFormat>,
    window: Option<WindowRaw>,
    block_size: Option<u32>,
) -> Result<TraceSpec, String> {
    let format = format.unwrap_or_default();
    let max_block = MAX_SYNTHETIC_PROMPT_WORDS as u32;
    let block_size = match (format, block_size) {
        (TraceFormat::Timestamps, Some(_)) => {
            return Err(
                "`block_size` is the size of a Mooncake trace's hash blocks: set `format: mooncake`, or drop it"
                    .into(),
            );
        }
        (_, Some(b)) if b == 0 || b > max_block => {
            return Err(format!("`block_size` {b} must be 1..={max_block} tokens"));
        }
        (_, b) => b.unwrap_or(MOONCAKE_BLOCK_SIZE),
    };
    Ok(TraceSpec {
        format,
        speed: speed.map_or(Ok(1.0), |s| {
            if s > 0.0 && s.is_finite() {
                Ok(s)
            } else {
                Err("`speed` must be > 0")
            }
        })?,
        window: window
            .map(Window::try_from)
            .transpose()?
            .unwrap_or_default(),
        block_size,
    })
}

impl Load {
    /// The open-loop arrival process, or `None` for closed-loop concurrency.
    #[must_use]
    pub fn arrival(&self) -> Option<arrival::Arrival> {
        use arrival::Arrival;
        Some(match self {
            Load::Constant { rate } => Arrival::Constant(*rate),
            Load::Poisson { rate } => Arrival::Gamma {
                rate: *rate,
                burstiness: 1.0,
            },
            Load::Gamma { rate, burstiness } => Arrival::Gamma {
                rate: *rate,
                burstiness: *burstiness,
            },
            Load::Ramp { from, to } => Arrival::Ramp {
                from: *from,
                to: *to,
            },
            Load::Trace { offsets, .. } => Arrival::Trace(offsets.clone()),
            Load::Concurrency { .. } => return None,
            Load::Shaped(base) => return base.arrival(),
        })
    }

    /// The load without its complexity shaping (itself when it has none).
    #[must_use]
    pub fn unshaped(&self) -> &Load {
        match self {
            Load::Shaped(base) => base,
            other => other,
        }
    }

    /// `load`, complexity-shaped when `self` is and `load` is an open-loop rate that can be
    /// (a knee search's steps keep their phase's shaping).
    #[must_use]
    pub fn shaped_like(&self, load: Load) -> Load {
        let shapeable = matches!(
            load,
            Load::Constant { .. } | Load::Poisson { .. } | Load::Gamma { .. } | Load::Ramp { .. }
        );
        if self.complexity_shaping() && shapeable {
            Load::Shaped(Box::new(load))
        } else {
            load
        }
    }

    /// Whether arrivals are spaced by each request's complexity score.
    #[must_use]
    pub fn complexity_shaping(&self) -> bool {
        matches!(self, Load::Shaped(_))
    }

    /// The `load_level` label: `rate=20/s`, `ramp=10..120/s`, `trace`, `concurrency=32`.
    #[must_use]
    pub fn level(&self) -> String {
        match self {
            Load::Constant { rate } | Load::Poisson { rate } | Load::Gamma { rate, .. } => {
                format!("rate={rate}/s")
            }
            Load::Ramp { from, to } => format!("ramp={from}..{to}/s"),
            Load::Trace { spec, .. } => format!("trace x{}", spec.speed),
            Load::Concurrency { users } => format!("concurrency={users}"),
            Load::Shaped(base) => format!("{} complexity-shaped", base.level()),
        }
    }

    /// Target requests per second (mean), when open-loop. For a complexity-shaped load, the
    /// base rate: the rate a prompt of score 0 is sent at, an upper bound of the achieved one.
    #[must_use]
    pub fn target_rate(&self, duration: Duration) -> Option<f64> {
        match self {
            Load::Constant { rate } | Load::Poisson { rate } | Load::Gamma { rate, .. } => {
                Some(*rate)
            }
            Load::Ramp { from, to } => Some(f64::midpoint(*from, *to)),
            Load::Trace { offsets, .. } => Some(offsets.len() as f64 / duration.as_secs_f64()),
            Load::Concurrency { .. } => None,
            Load::Shaped(base) => base.target_rate(duration),
        }
    }

    /// The trace rows the phase replays (`format: mooncake`).
    #[must_use]
    pub fn replay(&self) -> Option<Arc<Replay>> {
        match self {
            Load::Trace { replay, .. } => replay.clone(),
            _ => None,
        }
    }

    /// The prefix sharing of the trace rows the phase replays (`format: mooncake`).
    #[must_use]
    pub fn prefix_sharing(&self) -> Option<PrefixSharing> {
        self.replay().map(|r| r.sharing().clone())
    }
}

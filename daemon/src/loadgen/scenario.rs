//! Scenario files (experiment as code): the YAML schema, loading, and validation.
//!
//! The full schema with every field and default is documented in `docs/stress.md`;
//! `examples/seed-matrix.yaml` is a complete example. Unknown keys are refused, and
//! every error names the file, the line and what is wrong.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use rand::{SeedableRng, rngs::SmallRng};
use serde::{Deserialize, Deserializer, de::Error as _};

use super::{
    arrival,
    dataset::{Dataset, DatasetSpec},
    record::Endpoint,
    slo::Slo,
    template::{JsonTemplate, Template},
};

/// Hard ceilings no scenario can exceed (guardrails against typos such as `rate: 20000`).
pub const HARD_MAX_IN_FLIGHT: usize = 100_000;
/// Largest open-loop rate accepted, requests per second.
pub const HARD_MAX_RATE: f64 = 200_000.0;

/// A whole scenario file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Label `scenario` on every metric.
    #[serde(default = "default_name")]
    pub name: String,
    /// Base URL, e.g. `http://127.0.0.1:8000`. Non-loopback hosts need `--allow-remote`.
    pub target: String,
    /// Headers sent with every request (e.g. `Authorization`).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Per-request timeout (default 60s).
    #[serde(default = "default_timeout", deserialize_with = "de_duration")]
    pub timeout: Duration,
    /// After Ctrl-C or the last phase, how long in-flight requests may finish (default 5s).
    #[serde(default = "default_grace", deserialize_with = "de_duration")]
    pub grace: Duration,
    /// Cap on requests in flight over the whole run (default 10000).
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: usize,
    /// Abort the run when the error rate of the last second's finished requests exceeds this.
    #[serde(default, deserialize_with = "de_opt_ratio")]
    pub abort_error_rate: Option<f64>,
    /// Requests that must have finished before `abort_error_rate` is checked (default 50).
    #[serde(default = "default_abort_min")]
    pub abort_min_requests: u64,
    /// Random seed (schedules, templates, chaos); default: from the clock.
    pub seed: Option<u64>,
    /// Named datasets for `${dataset.*}` and `request.dataset`.
    #[serde(default)]
    pub datasets: BTreeMap<String, DatasetSpec>,
    /// Phases, run one after the other.
    pub phases: Vec<Phase>,
    /// Datasets after loading (filled by [`Scenario::resolve`]).
    #[serde(skip)]
    pub loaded: BTreeMap<String, Arc<Dataset>>,
}

/// One phase: a load shape held for a duration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Phase {
    /// Phase name (unique).
    pub name: String,
    /// Label `scenario` dimension such as baseline, soak, burst (default: the name).
    pub label: Option<String>,
    /// How long the phase sends (required).
    #[serde(deserialize_with = "de_duration")]
    pub duration: Duration,
    /// Arrival process or concurrency.
    pub load: Load,
    /// What each request looks like.
    #[serde(default)]
    pub request: RequestSpec,
    /// Cap on this phase's requests in flight.
    pub max_in_flight: Option<usize>,
    /// Cap on requested output tokens per second (sum of `max_tokens` sent).
    pub max_tokens_per_s: Option<f64>,
    /// What to do with a request when a cap is hit.
    #[serde(default)]
    pub when_capped: CapPolicy,
    /// Fault knobs.
    #[serde(default)]
    pub chaos: ChaosSpec,
    /// SLOs checked at the end of the phase (see `slo.rs` for the grammar).
    #[serde(default, deserialize_with = "de_slos")]
    pub slo: Vec<Slo>,
    /// One-off requests at given offsets into the phase (e.g. trigger an index rebuild).
    #[serde(default)]
    pub events: Vec<EventSpec>,
}

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
    /// `shape: trace, path: FILE, speed: S`: replay of a timestamped trace (one timestamp
    /// per line; see `arrival::parse_trace`), relative to the scenario file.
    Trace {
        /// Trace file.
        path: PathBuf,
        /// Replay speed factor (2 = twice as fast).
        speed: f64,
        /// Offsets read from the file (filled by [`Scenario::resolve`]).
        offsets: Vec<Duration>,
    },
    /// `shape: concurrency, users: N`: closed loop, each user sends its next request when
    /// the last one ends.
    Concurrency {
        /// Number of concurrent users (connections).
        users: usize,
    },
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
    users: Option<usize>,
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
            ("users", r.users.is_some()),
        ]
        .iter()
        .filter_map(|(n, g)| g.then_some(*n))
        .collect();
        let allowed: &[&str] = match r.shape.as_str() {
            "constant" | "poisson" => &["rate"],
            "gamma" => &["rate", "burstiness"],
            "ramp" => &["from", "to"],
            "trace" => &["path", "speed"],
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
        Ok(match r.shape.as_str() {
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
                    .filter(|b| *b > 0.0 && b.is_finite())
                    .ok_or("shape `gamma` needs `burstiness:` > 0 (1 = Poisson)")?,
            },
            "ramp" => Load::Ramp {
                from: rate_ok("from", r.from)?,
                to: rate_ok("to", r.to)?,
            },
            "trace" => Load::Trace {
                path: r
                    .path
                    .ok_or("shape `trace` needs `path:` (a file of timestamps)")?,
                speed: r.speed.map_or(Ok(1.0), |s| {
                    if s > 0.0 && s.is_finite() {
                        Ok(s)
                    } else {
                        Err("`speed` must be > 0")
                    }
                })?,
                offsets: Vec::new(),
            },
            _ => Load::Concurrency {
                users: r.users.ok_or("shape `concurrency` needs `users:`")?,
            },
        })
    }
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
        })
    }

    /// The `load_level` label: `rate=20/s`, `ramp=10..120/s`, `trace`, `concurrency=32`.
    #[must_use]
    pub fn level(&self) -> String {
        match self {
            Load::Constant { rate } | Load::Poisson { rate } | Load::Gamma { rate, .. } => {
                format!("rate={rate}/s")
            }
            Load::Ramp { from, to } => format!("ramp={from}..{to}/s"),
            Load::Trace { speed, .. } => format!("trace x{speed}"),
            Load::Concurrency { users } => format!("concurrency={users}"),
        }
    }

    /// Target requests per second (mean), when open-loop.
    #[must_use]
    pub fn target_rate(&self, duration: Duration) -> Option<f64> {
        match self {
            Load::Constant { rate } | Load::Poisson { rate } | Load::Gamma { rate, .. } => {
                Some(*rate)
            }
            Load::Ramp { from, to } => Some(f64::midpoint(*from, *to)),
            Load::Trace { offsets, .. } => Some(offsets.len() as f64 / duration.as_secs_f64()),
            Load::Concurrency { .. } => None,
        }
    }
}

/// What happens to a request that a cap (in-flight or tokens/s) holds back.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum CapPolicy {
    /// Wait for room; the wait shows as send lag and inside every latency.
    #[default]
    Wait,
    /// Drop it and count it (k6's `dropped_iterations`).
    Drop,
}

/// The request of a phase. Fields that do not apply to the endpoint are refused.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestSpec {
    /// `chat` (default), `completions`, `vector_search` or `http`.
    pub endpoint: Option<Endpoint>,
    /// Path under the target (default per endpoint, e.g. `/v1/chat/completions`).
    pub path: Option<String>,
    /// HTTP method for `http` (default GET, or POST when a body is given).
    pub method: Option<String>,
    /// `model` field (default `default`).
    pub model: Option<String>,
    /// Prompt template (default `${dataset.prompt}` with a dataset, else a fixed prompt).
    #[serde(default, deserialize_with = "de_opt_template")]
    pub prompt: Option<Template>,
    /// Dataset name from `datasets:`.
    pub dataset: Option<String>,
    /// `max_tokens` (default: the dataset row's output length, else server default).
    pub max_tokens: Option<u32>,
    /// `temperature`: a number or a template such as `${random_float(0.3,0.8)}`.
    #[serde(default, deserialize_with = "de_opt_json_template")]
    pub temperature: Option<JsonTemplate>,
    /// Stream the answer (default true for LLM endpoints).
    pub stream: Option<bool>,
    /// Extra JSON fields merged into the body (templated); for `http`, the whole body.
    #[serde(default, deserialize_with = "de_opt_json_template")]
    pub body: Option<JsonTemplate>,
    /// Per-request headers, added to the scenario's.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Vector search: query text template (the server embeds it).
    #[serde(default, deserialize_with = "de_opt_template")]
    pub text: Option<Template>,
    /// Vector search: random unit query vectors of this many dimensions.
    pub dimensions: Option<usize>,
    /// Vector search: `top_k` (default 10).
    pub top_k: Option<u32>,
    /// Vector search: `ef_search`.
    pub ef_search: Option<u32>,
    /// Vector search: fraction of queries also sent to the exact endpoint for recall@k.
    #[serde(default, deserialize_with = "de_opt_ratio")]
    pub recall_sample: Option<f64>,
    /// Vector search: ground-truth path (default `/v1/vector/exact`).
    pub exact_path: Option<String>,
}

/// Fault knobs of a phase (fractions of its requests).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ChaosSpec {
    /// Fraction sent with `max_tokens = 1`.
    #[serde(default, deserialize_with = "de_ratio")]
    pub max_tokens_one: f64,
    /// Fraction the client closes right after the first token.
    #[serde(default, deserialize_with = "de_ratio")]
    pub abort_mid_stream: f64,
    /// Fraction whose prompt is inflated to `oversize_tokens` words.
    #[serde(default, deserialize_with = "de_ratio")]
    pub oversize_prompt: f64,
    /// Size of an oversize prompt in words (default 200000).
    pub oversize_tokens: Option<u32>,
}

/// A one-off request during a phase.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct EventSpec {
    /// Offset into the phase (default 0s).
    #[serde(default, deserialize_with = "de_duration")]
    pub at: Duration,
    /// Method (default POST).
    #[serde(default = "default_post")]
    pub method: String,
    /// Path under the target, e.g. `/v1/vector/rebuild`.
    pub path: String,
    /// JSON body (default `{}`).
    pub body: Option<serde_json::Value>,
}

/// A scenario that cannot be used: file, line (when known) and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("{file}{}: {msg}", line.map(|(l, c)| format!(":{l}:{c}")).unwrap_or_default())]
pub struct ScenarioError {
    /// The scenario file (or `<flags>`).
    pub file: String,
    /// 1-based line and column.
    pub line: Option<(usize, usize)>,
    /// What is wrong and what to do.
    pub msg: String,
}

impl Scenario {
    /// Reads, parses, validates and resolves a scenario file.
    pub fn from_file(path: &Path) -> Result<Self, ScenarioError> {
        let src = std::fs::read_to_string(path).map_err(|e| ScenarioError {
            file: path.display().to_string(),
            line: None,
            msg: format!("cannot read scenario: {e}"),
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::from_yaml(&src, &path.display().to_string(), base)
    }

    /// Parses YAML text; `file` names it in errors, `base` resolves relative paths.
    pub fn from_yaml(src: &str, file: &str, base: &Path) -> Result<Self, ScenarioError> {
        let mut s: Scenario = serde_yaml::from_str(src).map_err(|e| {
            let mut msg = e.to_string();
            // serde_yaml appends " at line L column C"; we print the location up front.
            if let Some(i) = msg.find(" at line ") {
                msg.truncate(i);
            }
            if msg.contains("missing field `duration`") {
                msg.push_str(" (every phase needs one, e.g. `duration: 60s`)");
            }
            let line = e
                .location()
                .map(|l| refine(src, (l.line(), l.column()), &msg));
            ScenarioError {
                file: file.to_string(),
                line,
                msg,
            }
        })?;
        s.resolve(file, src, base)?;
        Ok(s)
    }

    /// Cross-field checks, datasets and trace files. `src` is used to find lines.
    pub fn resolve(&mut self, file: &str, src: &str, base: &Path) -> Result<(), ScenarioError> {
        let err = |needle: &str, msg: String| ScenarioError {
            file: file.to_string(),
            line: line_of(src, needle),
            msg,
        };
        if self.phases.is_empty() {
            return Err(err(
                "phases",
                "`phases` is empty: add at least one phase".into(),
            ));
        }
        if self.max_in_flight == 0 || self.max_in_flight > HARD_MAX_IN_FLIGHT {
            return Err(err(
                "max_in_flight",
                format!("max_in_flight must be 1..={HARD_MAX_IN_FLIGHT}"),
            ));
        }
        let mut rng = SmallRng::seed_from_u64(self.seed.unwrap_or(0));
        for (name, spec) in &self.datasets {
            let ds = Dataset::load(spec, base, &mut rng)
                .map_err(|e| err(&format!("{name}:"), format!("dataset `{name}`: {e}")))?;
            self.loaded.insert(name.clone(), Arc::new(ds));
        }
        let mut seen = std::collections::BTreeSet::new();
        for p in &mut self.phases {
            if !seen.insert(p.name.clone()) {
                return Err(err(
                    &format!("name: {}", p.name),
                    format!("phase name `{}` is used twice", p.name),
                ));
            }
            check_phase(p, &self.loaded, base, &err)?;
        }
        Ok(())
    }

    /// The target's host, for the loopback guardrail.
    #[must_use]
    pub fn target_host(&self) -> Option<String> {
        let uri: hyper::Uri = self.target.parse().ok()?;
        uri.host()
            .map(|h| h.trim_start_matches('[').trim_end_matches(']').to_string())
    }
}

/// Checks one phase and reads its trace file.
fn check_phase(
    p: &mut Phase,
    loaded: &BTreeMap<String, Arc<Dataset>>,
    base: &Path,
    err: &dyn Fn(&str, String) -> ScenarioError,
) -> Result<(), ScenarioError> {
    let at = format!("name: {}", p.name);
    if p.duration.is_zero() {
        return Err(err(
            &at,
            format!("phase `{}`: duration must be > 0", p.name),
        ));
    }
    if let Some(ds) = &p.request.dataset
        && !loaded.contains_key(ds)
    {
        return Err(err(
            &format!("dataset: {ds}"),
            format!(
                "phase `{}` uses dataset `{ds}`, which `datasets:` does not define",
                p.name
            ),
        ));
    }
    let uses = p
        .request
        .prompt
        .as_ref()
        .is_some_and(Template::uses_dataset)
        || p.request.text.as_ref().is_some_and(Template::uses_dataset);
    if uses && p.request.dataset.is_none() {
        return Err(err(
            &at,
            format!(
                "phase `{}` uses ${{dataset.*}} but sets no `request.dataset`",
                p.name
            ),
        ));
    }
    match &mut p.load {
        Load::Concurrency { users } if *users == 0 || *users > HARD_MAX_IN_FLIGHT => {
            return Err(err(
                &at,
                format!("phase `{}`: users must be 1..={HARD_MAX_IN_FLIGHT}", p.name),
            ));
        }
        Load::Trace {
            path,
            speed,
            offsets,
        } => {
            *offsets = read_trace(&base.join(&*path), *speed).map_err(|e| match e.line {
                Some(_) => e,
                None => err(&at, format!("phase `{}`: {}", p.name, e.msg)),
            })?;
        }
        _ => {}
    }
    if let Some(rate) = p
        .load
        .target_rate(p.duration)
        .filter(|r| *r > HARD_MAX_RATE)
    {
        return Err(err(
            &at,
            format!(
                "phase `{}`: rate {rate}/s is above the hard cap {HARD_MAX_RATE}/s",
                p.name
            ),
        ));
    }
    let endpoint = p.request.endpoint.unwrap_or(Endpoint::Chat);
    let vector_only = p.request.text.is_some()
        || p.request.dimensions.is_some()
        || p.request.top_k.is_some()
        || p.request.ef_search.is_some()
        || p.request.recall_sample.is_some();
    if vector_only && endpoint != Endpoint::VectorSearch {
        return Err(err(
            &at,
            format!(
                "phase `{}`: text/dimensions/top_k/ef_search/recall_sample need `endpoint: vector_search`",
                p.name
            ),
        ));
    }
    if endpoint == Endpoint::VectorSearch
        && p.request.text.is_none()
        && p.request.dimensions.is_none()
    {
        return Err(err(
            &at,
            format!(
                "phase `{}`: a vector_search request needs `text:` or `dimensions:`",
                p.name
            ),
        ));
    }
    Ok(())
}

/// Reads a trace file; errors carry the trace file's own line.
fn read_trace(full: &Path, speed: f64) -> Result<Vec<Duration>, ScenarioError> {
    let file = full.display().to_string();
    let text = std::fs::read_to_string(full).map_err(|e| ScenarioError {
        file: file.clone(),
        line: None,
        msg: format!("cannot read trace {file}: {e}"),
    })?;
    arrival::parse_trace(&text, speed).map_err(|(line, msg)| ScenarioError {
        file,
        line: Some((line, 1)),
        msg,
    })
}

/// Whether `host` is loopback (`localhost`, `127.0.0.0/8`, `::1`).
#[must_use]
pub fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// `serde_yaml` places our own validation errors at the start of the enclosing mapping;
/// when the message quotes the offending text, point at that text instead.
fn refine(src: &str, at: (usize, usize), msg: &str) -> (usize, usize) {
    let serde_own = [
        "missing field",
        "unknown field",
        "invalid type",
        "invalid value",
        "did not find",
        "unknown variant",
    ];
    if serde_own.iter().any(|p| msg.contains(p)) {
        return at;
    }
    let quoted = msg
        .split_once(['"', '`'])
        .and_then(|(_, rest)| rest.split_once(['"', '`']))
        .map(|(q, _)| q);
    let Some(q) = quoted.filter(|q| !q.is_empty()) else {
        return at;
    };
    src.lines()
        .enumerate()
        .skip(at.0.saturating_sub(1))
        .take(200)
        .find_map(|(i, l)| l.find(q).map(|c| (i + 1, c + 1)))
        .unwrap_or(at)
}

fn line_of(src: &str, needle: &str) -> Option<(usize, usize)> {
    src.lines()
        .enumerate()
        .find_map(|(i, l)| l.find(needle).map(|c| (i + 1, c + 1)))
}

fn default_name() -> String {
    "stress".into()
}
fn default_timeout() -> Duration {
    Duration::from_mins(1)
}
fn default_grace() -> Duration {
    Duration::from_secs(5)
}
fn default_max_in_flight() -> usize {
    10_000
}
fn default_abort_min() -> u64 {
    50
}
fn default_post() -> String {
    "POST".into()
}

/// `60s`, `500ms`, `1m 30s` (humantime).
pub fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = String::deserialize(d)?;
    humantime::parse_duration(&s).map_err(|e| {
        D::Error::custom(format!(
            "bad duration {s:?}: {e} (write e.g. `60s`, `500ms`)"
        ))
    })
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RatioRepr {
    Num(f64),
    Text(String),
}

fn de_ratio<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let repr = RatioRepr::deserialize(d)?;
    let text = match &repr {
        RatioRepr::Num(v) => v.to_string(),
        RatioRepr::Text(t) => t.clone(),
    };
    let v = match repr {
        RatioRepr::Num(v) => v,
        RatioRepr::Text(t) => t
            .trim()
            .strip_suffix('%')
            .and_then(|p| p.trim().parse::<f64>().ok())
            .map(|p| p / 100.0)
            .ok_or_else(|| D::Error::custom(format!("bad fraction {t:?}: write 0.1 or 10%")))?,
    };
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(D::Error::custom(format!(
            "fraction `{text}` is not within 0..1 (0%..100%)"
        )))
    }
}

fn de_opt_ratio<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    de_ratio(d).map(Some)
}

fn de_opt_template<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Template>, D::Error> {
    let s = String::deserialize(d)?;
    Template::parse(&s).map(Some).map_err(D::Error::custom)
}

fn de_opt_json_template<'de, D: Deserializer<'de>>(d: D) -> Result<Option<JsonTemplate>, D::Error> {
    let v = serde_json::Value::deserialize(d)?;
    JsonTemplate::compile(&v)
        .map(Some)
        .map_err(D::Error::custom)
}

fn de_slos<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Slo>, D::Error> {
    Vec::<String>::deserialize(d)?
        .iter()
        .map(|s| Slo::parse(s).map_err(D::Error::custom))
        .collect()
}

//! `request.session`: agentic sessions. Each arrival (open loop) or each user in turn (closed
//! loop) runs one session: a chain of LLM calls whose prompt is the session's history so far,
//! tool calls that wait (a drawn time, or a real HTTP endpoint) and append a result to the
//! context, sub-agents started together and joined, think time, and a context limit that
//! compacts the oldest turns (dropped, or replaced by a summary the model writes).
//!
//! ```yaml
//! request:
//!   max_tokens: 64                       # each llm step's default
//!   session:
//!     system_prompt_tokens: 400          # the same in every session (a prefix cache reuses it)
//!     task_tokens: 80                    # the task, made up (or `prompt:`/`dataset:` give it)
//!     context_limit: 3000                # tokens, as the client counts them
//!     compaction: {summary: 200}         # or `drop`
//!     steps:
//!       - llm: {}
//!       - repeat:
//!           times: 3
//!           steps:
//!             - tool: {name: search, wait: {lognormal: {median: 300ms, sigma: 0.6}}, result_tokens: [200, 600]}
//!             - llm: {max_tokens: 48}
//!       - agents:
//!           count: 3
//!           task_tokens: 60
//!           steps:
//!             - llm: {}
//!             - tool: {url: "http://127.0.0.1:8001/v1/tools/lookup", result_tokens: 150}
//!             - llm: {}
//!       - think: 1s
//!       - llm: {max_tokens: 256}
//! ```

use std::time::Duration;

use rand::Rng;
use rand_distr::{Distribution, Exp, LogNormal};
use serde::Deserialize;
use serde_json::Value;

use super::{Phase, limits::parse_duration};
use crate::measure::record::Endpoint;

/// Most tokens of one made-up text (system prompt, task, tool result, summary).
pub const MAX_TOKENS: u32 = 1_000_000;
/// Most sub-agents one `agents` step starts.
pub const MAX_AGENTS: u32 = 64;
/// Deepest nesting of sub-agents (the main agent is depth 0).
pub const MAX_DEPTH: u32 = 4;
/// Most rounds of one `repeat`.
pub const MAX_REPEAT: u32 = 1000;
/// Longest wait one draw gives (a lognormal's tail is unbounded).
pub const MAX_WAIT: Duration = Duration::from_hours(1);

/// `request.session`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionSpec {
    /// A system prompt of this many tokens, the same text in every session of the phase and in
    /// every sub-agent. Default none.
    #[serde(default)]
    pub system_prompt_tokens: u32,
    /// The task's tokens when the request has no `prompt` or `dataset` (made-up text, one per
    /// session). Default 64.
    #[serde(default = "default_task_tokens")]
    pub task_tokens: u32,
    /// Before a call whose context is longer than this (tokens as the client counts them),
    /// `compaction` shortens it. Default none.
    pub context_limit: Option<u32>,
    /// How the context is brought under `context_limit`.
    #[serde(default)]
    pub compaction: Compaction,
    /// What the main agent does, in order.
    pub steps: Vec<Step>,
}

fn default_task_tokens() -> u32 {
    64
}

/// How a context over its limit is shortened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(try_from = "Value")]
pub enum Compaction {
    /// The oldest turns are dropped until it fits.
    #[default]
    Drop,
    /// The oldest turns are replaced by a summary the model writes: a call whose prompt is
    /// those turns, asked for this many tokens (`max_tokens`).
    Summary(u32),
}

impl TryFrom<Value> for Compaction {
    type Error = String;

    /// `drop`, or `{summary: TOKENS}`.
    fn try_from(v: Value) -> Result<Self, String> {
        let bad = || {
            format!(
                "bad compaction `{v}`: write `compaction: drop` or `compaction: {{summary: 200}}` (tokens of the summary)"
            )
        };
        match &v {
            Value::String(s) if s == "drop" => Ok(Self::Drop),
            Value::Object(m) if m.len() == 1 => {
                let n = m.get("summary").and_then(Value::as_u64).ok_or_else(bad)?;
                u32::try_from(n)
                    .ok()
                    .filter(|n| (1..=MAX_TOKENS).contains(n))
                    .map(Self::Summary)
                    .ok_or_else(|| format!("compaction summary must be 1..={MAX_TOKENS} tokens"))
            }
            _ => Err(bad()),
        }
    }
}

/// One step of an agent, written as a one-key map (`- llm: {}`, `- think: 2s`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "StepRaw")]
pub enum Step {
    /// An LLM call whose prompt is the agent's history so far; its answer joins the history.
    Llm(LlmStep),
    /// A tool call: a wait, or an HTTP call; its result joins the history.
    Tool(ToolStep),
    /// The agent pauses (a user reading, a planner deciding); nothing joins the history.
    Think(Wait),
    /// Sub-agents started together, each with a context of its own; the parent waits for all
    /// of them and their results join its history.
    Agents(AgentsStep),
    /// These steps, again and again.
    Repeat(RepeatStep),
}

/// A step as written: exactly one of its keys.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StepRaw {
    llm: Option<LlmStep>,
    tool: Option<ToolStep>,
    think: Option<Wait>,
    agents: Option<AgentsStep>,
    repeat: Option<RepeatStep>,
}

impl TryFrom<StepRaw> for Step {
    type Error = String;

    fn try_from(r: StepRaw) -> Result<Self, String> {
        let mut given = [
            r.llm.map(Step::Llm),
            r.tool.map(Step::Tool),
            r.think.map(Step::Think),
            r.agents.map(Step::Agents),
            r.repeat.map(Step::Repeat),
        ]
        .into_iter()
        .flatten();
        match (given.next(), given.next()) {
            (Some(step), None) => Ok(step),
            _ => Err(
                "a step is one of `llm: {..}`, `tool: {..}`, `think: WAIT`, `agents: {..}`, `repeat: {..}`: write each in its own list item"
                    .into(),
            ),
        }
    }
}

/// `llm:`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmStep {
    /// `max_tokens` of the call (default: the request's `max_tokens`, else none).
    pub max_tokens: Option<u32>,
}

/// `tool:`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolStep {
    /// The tool's name, in the result's text and errors (default `tool`).
    pub name: Option<String>,
    /// How long the tool takes, drawn per call (a tool without an endpoint).
    pub wait: Option<Wait>,
    /// A real tool endpoint: the arguments (`{"query": ...}`) are sent there (`POST`) and the
    /// wait is its answer's.
    pub url: Option<String>,
    /// Tokens of the result appended to the context: a number or `[min, max]` (uniform).
    /// Required with `wait`; with `url` the default is the answer's body.
    pub result_tokens: Option<Tokens>,
}

/// `agents:`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentsStep {
    /// Sub-agents started together (1..=64).
    pub count: u32,
    /// Tokens of each one's task (made up; default the session's `task_tokens`).
    pub task_tokens: Option<u32>,
    /// Tokens of the result each one hands back (default: its last answer).
    pub result_tokens: Option<Tokens>,
    /// What each sub-agent does (at least one `llm` step).
    pub steps: Vec<Step>,
}

/// `repeat:`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepeatStep {
    /// Rounds (1..=1000).
    pub times: u32,
    /// The steps of one round.
    pub steps: Vec<Step>,
}

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

/// What is wrong with a session phase (`request.session`), if anything: one line.
#[must_use]
pub fn problem(p: &Phase) -> Option<String> {
    let s = p.request.session.as_ref()?;
    let r = &p.request;
    if r.endpoint.unwrap_or(Endpoint::Chat) != Endpoint::Chat {
        return Some("`session:` needs `endpoint: chat` (a history is a list of messages)".into());
    }
    let misplaced = [
        ("conversation", r.conversation.is_some()),
        ("pipeline", r.pipeline.is_some()),
        ("method", r.method.is_some()),
    ];
    if let Some((field, _)) = misplaced.iter().find(|(_, given)| *given) {
        return Some(format!(
            "`request.{field}` does not go with `session:`: drop one of them"
        ));
    }
    if p.chaos != super::ChaosSpec::default() || p.load.complexity_shaping() {
        return Some("a session phase takes no `chaos` nor `complexity_shaping`: drop them".into());
    }
    if s.system_prompt_tokens > MAX_TOKENS || !(1..=MAX_TOKENS).contains(&s.task_tokens) {
        return Some(format!(
            "session system_prompt_tokens must be at most {MAX_TOKENS} and task_tokens 1..={MAX_TOKENS}"
        ));
    }
    if let Some(limit) = s.context_limit {
        let summary = match s.compaction {
            Compaction::Summary(n) => n,
            Compaction::Drop => 0,
        };
        let floor = s.system_prompt_tokens + s.task_tokens + summary;
        if limit <= floor {
            return Some(format!(
                "session context_limit {limit} leaves no room: the system prompt, the task and the summary take {floor} tokens already"
            ));
        }
    }
    agent_problem(&s.steps, 0)
}

/// What is wrong with the steps of an agent at `depth`, if anything.
fn agent_problem(steps: &[Step], depth: u32) -> Option<String> {
    if !has_llm(steps) {
        let who = if depth == 0 {
            "the session".to_owned()
        } else {
            format!("a sub-agent at depth {depth}")
        };
        return Some(format!(
            "{who} needs an `llm` step (the steps are llm, tool, think, agents and repeat)"
        ));
    }
    each_step_problem(steps, depth)
}

/// What is wrong with one of `steps` (of an agent at `depth`), if anything.
fn each_step_problem(steps: &[Step], depth: u32) -> Option<String> {
    steps.iter().find_map(|step| match step {
        Step::Llm(l) => {
            (l.max_tokens == Some(0)).then(|| "llm max_tokens must be at least 1".into())
        }
        Step::Tool(t) => tool_problem(t),
        Step::Think(_) => None,
        Step::Agents(a) => {
            if !(1..=MAX_AGENTS).contains(&a.count) {
                Some(format!("agents count must be 1..={MAX_AGENTS}"))
            } else if depth + 1 > MAX_DEPTH {
                Some(format!("sub-agents nest at most {MAX_DEPTH} deep"))
            } else if a
                .task_tokens
                .is_some_and(|n| !(1..=MAX_TOKENS).contains(&n))
            {
                Some(format!("agents task_tokens must be 1..={MAX_TOKENS}"))
            } else {
                agent_problem(&a.steps, depth + 1)
            }
        }
        Step::Repeat(r) => {
            if !(1..=MAX_REPEAT).contains(&r.times) {
                Some(format!("repeat times must be 1..={MAX_REPEAT}"))
            } else if r.steps.is_empty() {
                Some("a `repeat` needs `steps:`".into())
            } else {
                each_step_problem(&r.steps, depth)
            }
        }
    })
}

/// Whether the steps call the model, directly or in a `repeat`.
fn has_llm(steps: &[Step]) -> bool {
    steps.iter().any(|s| match s {
        Step::Llm(_) => true,
        Step::Repeat(r) => has_llm(&r.steps),
        _ => false,
    })
}

/// What is wrong with a tool step, if anything.
fn tool_problem(t: &ToolStep) -> Option<String> {
    let name = t.name.as_deref().unwrap_or("tool");
    if name.is_empty() || name.len() > 64 {
        return Some("a tool's name has 1 to 64 characters".into());
    }
    match (&t.wait, &t.url) {
        (Some(_), Some(_)) => Some(format!(
            "tool `{name}` has both `wait` and `url`: a tool either waits a drawn time or calls its endpoint"
        )),
        (None, None) => Some(format!(
            "tool `{name}` needs `wait:` (a drawn time) or `url:` (a real endpoint)"
        )),
        (Some(_), None) if t.result_tokens.is_none() => Some(format!(
            "tool `{name}` needs `result_tokens:` (what its result adds to the context)"
        )),
        (None, Some(url)) if !(url.starts_with("http://") || url.starts_with("https://")) => Some(
            format!("tool `{name}`: {url:?} is not an http:// or https:// URL"),
        ),
        _ => None,
    }
}

/// Every tool URL of the steps, sub-agents' included (each once).
#[must_use]
pub fn tool_urls(steps: &[Step]) -> Vec<String> {
    let mut out = Vec::new();
    collect_urls(steps, &mut out);
    out.sort_unstable();
    out.dedup();
    out
}

fn collect_urls(steps: &[Step], out: &mut Vec<String>) {
    for s in steps {
        match s {
            Step::Tool(ToolStep { url: Some(u), .. }) => out.push(u.clone()),
            Step::Agents(a) => collect_urls(&a.steps, out),
            Step::Repeat(r) => collect_urls(&r.steps, out),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use rand::{SeedableRng as _, rngs::SmallRng};

    use super::*;
    use crate::loadgen::scenario::plan::Plan;

    /// The error of a phase whose request is `request` (YAML under `request:`), or "" when it
    /// is accepted.
    fn error(request: &str) -> String {
        let src = format!(
            "target: http://127.0.0.1:1\nphases:\n  - name: p\n    duration: 10s\n    load: {{shape: poisson, rate: 1}}\n    request:\n{request}"
        );
        Plan::from_yaml(&src, "t.yaml", Path::new("."))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    }

    fn session(body: &str) -> String {
        error(&format!("      session:\n{body}"))
    }

    #[test]
    fn a_whole_session_parses() {
        let s: SessionSpec = serde_norway::from_str(
            "system_prompt_tokens: 400\ncontext_limit: 3000\ncompaction: {summary: 200}\nsteps:\n  - llm: {}\n  - repeat:\n      times: 3\n      steps:\n        - tool: {name: search, wait: {lognormal: {median: 300ms, sigma: 0.6}}, result_tokens: [200, 600]}\n        - llm: {max_tokens: 48}\n  - agents:\n      count: 3\n      steps:\n        - llm: {}\n        - tool: {url: 'http://127.0.0.1:8001/v1/tools/lookup'}\n  - think: {exponential: 1s}\n  - llm: {}\n",
        )
        .unwrap();
        assert_eq!(s.compaction, Compaction::Summary(200));
        assert_eq!(s.task_tokens, 64);
        let Step::Repeat(r) = &s.steps[1] else {
            panic!("{:?}", s.steps[1]);
        };
        assert_eq!(r.times, 3);
        let Step::Tool(t) = &r.steps[0] else {
            panic!("{:?}", r.steps[0]);
        };
        assert_eq!(t.result_tokens, Some(Tokens { min: 200, max: 600 }));
        assert_eq!(
            tool_urls(&s.steps),
            ["http://127.0.0.1:8001/v1/tools/lookup"]
        );
        assert_eq!(agent_problem(&s.steps, 0), None);
    }

    #[test]
    fn waits_are_drawn_from_their_distribution() {
        let w = |y: &str| serde_norway::from_str::<Wait>(y).unwrap();
        let mut rng = SmallRng::seed_from_u64(3);
        assert_eq!(w("250ms").draw(&mut rng), Duration::from_millis(250));
        assert_eq!(w("{constant: 1s}").draw(&mut rng), Duration::from_secs(1));
        let mean = |d: Wait, rng: &mut SmallRng| {
            (0..20_000).map(|_| d.draw(rng).as_secs_f64()).sum::<f64>() / 20_000.0
        };
        let u = w("{uniform: [100ms, 300ms]}");
        assert!((0..1000).all(|_| {
            let x = u.draw(&mut rng);
            x >= Duration::from_millis(100) && x <= Duration::from_millis(300)
        }));
        assert!((mean(w("{exponential: 200ms}"), &mut rng) - 0.2).abs() < 0.01);
        let ln = w("{lognormal: {median: 200ms, sigma: 0.5}}");
        let mut draws: Vec<f64> = (0..20_000)
            .map(|_| ln.draw(&mut rng).as_secs_f64())
            .collect();
        draws.sort_by(f64::total_cmp);
        assert!((draws[10_000] - 0.2).abs() < 0.01, "{}", draws[10_000]);
        // A heavy tail is cut at the hour.
        let huge = w("{lognormal: {median: 1h, sigma: 10}}");
        assert!((0..100).all(|_| huge.draw(&mut rng) <= MAX_WAIT));
    }

    #[test]
    fn bad_sessions_are_refused_in_one_line() {
        let ok = "        steps: [{llm: {}}, {tool: {wait: 1s, result_tokens: 10}}, {think: 2s}, {llm: {}}]\n";
        assert_eq!(session(ok), "");
        for (body, says) in [
            (
                "        steps: [{think: 1s}]\n",
                "the session needs an `llm` step",
            ),
            (
                "        steps: [{llm: {}}, {agents: {count: 2, steps: [{think: 1s}]}}]\n",
                "a sub-agent at depth 1 needs an `llm` step",
            ),
            (
                "        steps: [{llm: {}}, {agents: {count: 0, steps: [{llm: {}}]}}]\n",
                "agents count must be 1..=64",
            ),
            (
                "        steps: [{llm: {}}, {tool: {wait: 1s}}]\n",
                "tool `tool` needs `result_tokens:`",
            ),
            (
                "        steps: [{llm: {}}, {tool: {name: s, result_tokens: 3}}]\n",
                "tool `s` needs `wait:`",
            ),
            (
                "        steps: [{llm: {}}, {tool: {wait: 1s, url: 'http://h/x', result_tokens: 3}}]\n",
                "has both `wait` and `url`",
            ),
            (
                "        steps: [{llm: {}}, {tool: {url: 'ftp://h/x'}}]\n",
                "not an http:// or https:// URL",
            ),
            (
                "        steps: [{llm: {}}, {repeat: {times: 0, steps: [{llm: {}}]}}]\n",
                "repeat times must be 1..=1000",
            ),
            (
                "        steps: [{llm: {max_tokens: 0}}]\n",
                "llm max_tokens must be at least 1",
            ),
            (
                "        steps: [{llm: {}}, {dance: {}}]\n",
                "unknown field `dance`",
            ),
            (
                "        steps: [{llm: {}, think: 1s}]\n",
                "a step is one of",
            ),
            (
                "        steps: [{llm: {}}, {think: soon}]\n",
                "bad duration \"soon\"",
            ),
            (
                "        steps: [{llm: {}}, {think: {gamma: 1s}}]\n",
                "unknown wait distribution `gamma`",
            ),
            (
                "        steps: [{llm: {}}, {tool: {wait: 1s, result_tokens: [9, 3]}}]\n",
                "bad token count",
            ),
            (
                "        compaction: squash\n        steps: [{llm: {}}]\n",
                "bad compaction",
            ),
            (
                "        context_limit: 60\n        steps: [{llm: {}}]\n",
                "context_limit 60 leaves no room",
            ),
        ] {
            let e = session(body);
            assert!(e.starts_with("t.yaml:") && e.contains(says), "{body}: {e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
        let nested = "{agents: {count: 1, steps: [{llm: {}}, X]}}";
        let mut deep = "{llm: {}}".to_owned();
        for _ in 0..5 {
            deep = nested.replace('X', &deep);
        }
        let e = session(&format!("        steps: [{{llm: {{}}}}, {deep}]\n"));
        assert!(e.contains("nest at most 4 deep"), "{e}");
        let e = error(&format!(
            "      conversation: {{turns: 2}}\n      session:\n{ok}"
        ));
        assert!(
            e.contains("`request.conversation` does not go with `session:`"),
            "{e}"
        );
        let e = error(&format!(
            "      endpoint: completions\n      session:\n{ok}"
        ));
        assert!(e.contains("`session:` needs `endpoint: chat`"), "{e}");
    }
}

//! `request.session` as written: the session's prompts, context limit and compaction, and the
//! steps of an agent (`llm`, `tool`, `think`, `agents`, `repeat`), one key each.

use serde::Deserialize;
use serde_json::Value;

use super::draw::{MAX_TOKENS, Tokens, Wait};

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

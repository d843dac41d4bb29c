//! What is wrong with a session phase, in one line: the request around it, its token counts
//! and context limit, and each agent's steps (an `llm` step in each, counts, nesting, tools).

use super::draw::MAX_TOKENS;
use super::spec::{Compaction, Step, ToolStep};
use crate::loadgen::scenario::Phase;
use crate::measure::record::Endpoint;

/// Most sub-agents one `agents` step starts.
pub const MAX_AGENTS: u32 = 64;
/// Deepest nesting of sub-agents (the main agent is depth 0).
pub const MAX_DEPTH: u32 = 4;
/// Most rounds of one `repeat`.
pub const MAX_REPEAT: u32 = 1000;

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
    if p.chaos != crate::loadgen::scenario::ChaosSpec::default() || p.load.complexity_shaping() {
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
pub(super) fn agent_problem(steps: &[Step], depth: u32) -> Option<String> {
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

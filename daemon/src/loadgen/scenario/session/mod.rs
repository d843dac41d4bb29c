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
//!
//! `spec` is the session as written, `draw` its token counts and waits, `check` what a phase
//! with one may hold.

mod check;
mod draw;
mod spec;

pub use check::{MAX_AGENTS, MAX_DEPTH, MAX_REPEAT, problem};
pub use draw::{MAX_TOKENS, MAX_WAIT, Tokens, Wait};
pub use spec::{
    AgentsStep, Compaction, LlmStep, RepeatStep, SessionSpec, Step, ToolStep, tool_urls,
};

#[cfg(test)]
mod tests;

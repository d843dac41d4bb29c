//! A phase's pipeline compiled from its spec (every step's service, request URI and settings,
//! the tools offered to the chat), and a task's input rendered from it.

use std::sync::Arc;

use rand::rngs::SmallRng;
use serde_json::{Value, json};

use super::step::{ChatCall, Detail, Step, service};
use crate::loadgen::{
    client::{Target, TargetError},
    scenario::{
        pipeline::{PipelineSpec, PromptPart, StepDetail},
        template::Ctx,
    },
};
use crate::measure::record::StepKind;

/// A phase's pipeline, compiled: every step's service, request URI and settings.
#[derive(Debug)]
pub struct Pipeline {
    /// The steps, in order.
    pub steps: Vec<Step>,
}

/// What a task needs besides the pipeline: its query and its chat prompt's rendered text.
#[derive(Debug, Clone)]
pub struct TaskInput {
    /// The query.
    pub query: String,
    /// The chat prompt, its template pieces rendered (`${docs}` and `${query}` left).
    pub prompt: Vec<Rendered>,
}

/// A piece of a rendered chat prompt.
#[derive(Debug, Clone)]
pub enum Rendered {
    /// Text.
    Text(String),
    /// The documents.
    Docs,
    /// The query.
    Query,
}

impl Pipeline {
    /// Compiles `spec` for phase `phase`: each step's service is its `url` or `target`;
    /// `model` is the request's (the step's own wins).
    pub fn new(
        spec: &PipelineSpec,
        phase: &str,
        model: &str,
        target: &Target,
    ) -> Result<Self, TargetError> {
        let tools: Vec<Value> = spec
            .steps
            .iter()
            .find_map(|s| match &s.detail {
                StepDetail::Tools { endpoints, .. } => {
                    Some(endpoints.keys().map(|n| tool_def(n)).collect())
                }
                _ => None,
            })
            .unwrap_or_default();
        // Validation makes a chat step sure; without one the tools step has nothing to go on.
        let chat = spec
            .steps
            .iter()
            .find(|s| s.kind == StepKind::Chat)
            .map(|s| {
                let (target, uri) = service(s, target)?;
                Ok::<_, TargetError>(Arc::new(ChatCall {
                    target,
                    uri,
                    model: s.model.clone().unwrap_or_else(|| model.to_owned()),
                    max_tokens: match &s.detail {
                        StepDetail::Chat { max_tokens, .. } => *max_tokens,
                        _ => None,
                    },
                    tools,
                }))
            })
            .transpose()?
            .ok_or_else(|| TargetError::Path("a pipeline needs a `chat` step".into()))?;
        let steps = spec
            .steps
            .iter()
            .map(|s| Step::new(s, phase, model, target, &chat))
            .collect::<Result<_, _>>()?;
        Ok(Self { steps })
    }

    /// Every service the pipeline calls (steps and tools), as their URLs' hosts with the URL,
    /// for the loopback guardrail.
    #[must_use]
    pub fn hosts(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for s in &self.steps {
            out.push((s.target.host().to_owned(), s.uri.to_string()));
            if let Detail::Tools { endpoints, .. } = &s.detail {
                for (t, uri) in endpoints.values() {
                    out.push((t.host().to_owned(), uri.to_string()));
                }
            }
        }
        out
    }

    /// Renders a task's query and its chat prompt's pieces: `query` is the request's prompt
    /// (rendered by the caller with the same `ctx`).
    pub fn task(&self, query: String, ctx: &mut Ctx<'_, SmallRng>) -> TaskInput {
        let prompt = self
            .steps
            .iter()
            .find_map(|s| match &s.detail {
                Detail::Chat { prompt, .. } => Some(prompt),
                _ => None,
            })
            .map(|p| {
                p.parts
                    .iter()
                    .map(|part| match part {
                        PromptPart::Text(t) => Rendered::Text(t.render(ctx)),
                        PromptPart::Docs => Rendered::Docs,
                        PromptPart::Query => Rendered::Query,
                    })
                    .collect()
            })
            .unwrap_or_default();
        TaskInput { query, prompt }
    }
}

/// The function definition offered for tool `name`: one string argument, `query`.
fn tool_def(name: &str) -> Value {
    json!({"type": "function", "function": {
        "name": name,
        "description": format!("The {name} tool."),
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    }})
}

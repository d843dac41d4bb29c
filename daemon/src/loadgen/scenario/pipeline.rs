//! `request.pipeline`: a client-orchestrated RAG / agent task, its steps run in order per
//! arrival: `embed` -> `search` -> `rerank` -> `chat` -> `tools` (each at most once, `chat`
//! required). Each step may go to its own service (`url`), have a `deadline` and a `fallback`
//! (`skip`, or `{default: VALUE}`) that stands in when it fails or passes its deadline.
//!
//! ```yaml
//! request:
//!   prompt: "${dataset.prompt}"          # the task's query
//!   pipeline:
//!     steps:
//!       - {kind: embed, url: "http://127.0.0.1:8001", deadline: 200ms, fallback: skip}
//!       - {kind: search, url: "http://127.0.0.1:8002", top_k: 8}
//!       - {kind: rerank, url: "http://127.0.0.1:8001", top_n: 3, fallback: skip}
//!       - {kind: chat, prompt: "Context:\n${docs}\n\nQuestion: ${query}", max_tokens: 64}
//!       - {kind: tools, max_depth: 2, endpoints: {lookup: "http://127.0.0.1:8004/tool"}}
//! ```

use std::{collections::BTreeMap, time::Duration};

use serde::Deserialize;
use serde_json::Value;

use crate::loadgen::scenario::{
    json_path::JsonPath,
    limits::de_opt_duration,
    template::{Template, TemplateError},
    vector::{ApiKind, JsonApiSpec},
};
pub use crate::measure::record::StepKind;

/// Most tool-call rounds a `tools` step may allow.
pub const MAX_TOOL_DEPTH: u32 = 16;

/// `request.pipeline`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineSpec {
    /// The steps, in order.
    pub steps: Vec<StepSpec>,
}

/// What stands in for a step that failed or passed its deadline.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "Value")]
pub enum Fallback {
    /// Go on without the step's result: no vector (search sends the query's text), the
    /// documents as they were (rerank), no answer (chat), the answer so far (tools).
    Skip,
    /// Go on with this value as the step's result: a vector (embed), a list of document texts
    /// (search, rerank), the answer's text (chat, tools).
    Default(Value),
}

impl TryFrom<Value> for Fallback {
    type Error = String;

    /// `skip`, or `{default: VALUE}`.
    fn try_from(v: Value) -> Result<Self, String> {
        match v {
            Value::String(w) if w == "skip" => Ok(Fallback::Skip),
            Value::Object(mut m) if m.len() == 1 && m.contains_key("default") => {
                Ok(Fallback::Default(m.remove("default").unwrap_or_default()))
            }
            other => Err(format!(
                "bad fallback `{other}`: write `fallback: skip` or `fallback: {{default: VALUE}}`"
            )),
        }
    }
}

/// One step. Written flat (`{kind: rerank, top_n: 3}`); each kind takes only its own fields.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "StepRaw")]
pub struct StepSpec {
    /// The kind.
    pub kind: StepKind,
    /// Base URL of the step's service (default: the scenario's `target`).
    pub url: Option<String>,
    /// Path under it (default per kind: `/v1/embeddings`, the vector API's, `/v1/rerank`,
    /// `/v1/chat/completions`).
    pub path: Option<String>,
    /// `model` (default: the request's model).
    pub model: Option<String>,
    /// The step fails when it takes longer than this (its fallback then stands in).
    pub deadline: Option<Duration>,
    /// What stands in when it fails or passes its deadline (none: the task fails).
    pub fallback: Option<Fallback>,
    /// What the kind alone takes.
    pub detail: StepDetail,
}

/// The fields of one kind of step.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)] // one per step, parsed once
pub enum StepDetail {
    /// `embed`: nothing more.
    Embed,
    /// `search`: the vector API and its settings.
    Search {
        /// `api`: sim (default), chroma, qdrant or json.
        api: ApiKind,
        /// `collection` (chroma, qdrant; default `inferscope`).
        collection: Option<String>,
        /// `top_k` (default 10).
        top_k: u32,
        /// `ef_search`.
        ef_search: Option<u32>,
        /// `json` (api: json): body template and answer paths.
        json: Option<JsonApiSpec>,
        /// Where each hit's text is in the answer (e.g. `$.results[*].text`); without it each
        /// hit becomes a passage made up from its id.
        texts: Option<JsonPath>,
    },
    /// `rerank`.
    Rerank {
        /// `top_n`: documents kept, best first (default: all).
        top_n: Option<u32>,
    },
    /// `chat`.
    Chat {
        /// The user message: `${docs}` (the documents, numbered), `${query}` (the task's
        /// query) and any request template placeholder.
        prompt: ChatPrompt,
        /// `max_tokens`.
        max_tokens: Option<u32>,
    },
    /// `tools`.
    Tools {
        /// Tool-call rounds at most (1..=16): a chat that still calls a tool after them ends
        /// the step with its last answer.
        max_depth: u32,
        /// Tool name -> where to POST its arguments: a URL, or a path under the step's `url`.
        endpoints: BTreeMap<String, String>,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StepRaw {
    kind: String,
    url: Option<String>,
    path: Option<String>,
    model: Option<String>,
    #[serde(default, deserialize_with = "de_opt_duration")]
    deadline: Option<Duration>,
    fallback: Option<Fallback>,
    api: Option<ApiKind>,
    collection: Option<String>,
    top_k: Option<u32>,
    ef_search: Option<u32>,
    json: Option<JsonApiSpec>,
    texts: Option<JsonPath>,
    top_n: Option<u32>,
    prompt: Option<String>,
    max_tokens: Option<u32>,
    max_depth: Option<u32>,
    endpoints: Option<BTreeMap<String, String>>,
}

impl TryFrom<StepRaw> for StepSpec {
    type Error = String;

    #[allow(clippy::too_many_lines)] // one check after the other, each with its own message
    fn try_from(r: StepRaw) -> Result<Self, String> {
        let kind = StepKind::ALL
            .into_iter()
            .find(|k| k.name() == r.kind)
            .ok_or_else(|| {
                format!(
                    "unknown pipeline step `{}`: use embed, search, rerank, chat or tools",
                    r.kind
                )
            })?;
        let given: Vec<&str> = [
            ("model", r.model.is_some()),
            ("api", r.api.is_some()),
            ("collection", r.collection.is_some()),
            ("top_k", r.top_k.is_some()),
            ("ef_search", r.ef_search.is_some()),
            ("json", r.json.is_some()),
            ("texts", r.texts.is_some()),
            ("top_n", r.top_n.is_some()),
            ("prompt", r.prompt.is_some()),
            ("max_tokens", r.max_tokens.is_some()),
            ("max_depth", r.max_depth.is_some()),
            ("endpoints", r.endpoints.is_some()),
            ("path", r.path.is_some()),
        ]
        .iter()
        .filter_map(|(n, g)| g.then_some(*n))
        .collect();
        let own: &[&str] = match kind {
            StepKind::Embed => &["model", "path"],
            StepKind::Search => &[
                "api",
                "collection",
                "top_k",
                "ef_search",
                "json",
                "texts",
                "path",
            ],
            StepKind::Rerank => &["model", "top_n", "path"],
            StepKind::Chat => &["model", "prompt", "max_tokens", "path"],
            StepKind::Tools => &["max_depth", "endpoints"],
        };
        if let Some(extra) = given.iter().find(|g| !own.contains(g)) {
            return Err(format!(
                "pipeline step `{}` does not take `{extra}` (it takes: url, deadline, fallback, {})",
                kind.name(),
                own.join(", ")
            ));
        }
        if let Some(Fallback::Default(v)) = &r.fallback
            && let Some(why) = default_problem(kind, v)
        {
            return Err(format!("pipeline step `{}`: {why}", kind.name()));
        }
        let detail = match kind {
            StepKind::Embed => StepDetail::Embed,
            StepKind::Search => {
                let api = r.api.unwrap_or_default();
                if (api == ApiKind::Json) != r.json.is_some() {
                    return Err(
                        "pipeline step `search`: `api: json` and a `json:` block go together"
                            .into(),
                    );
                }
                if api == ApiKind::Json && r.path.is_none() {
                    return Err(
                        "pipeline step `search`: `api: json` needs `path:` (where to POST the body)"
                            .into(),
                    );
                }
                let top_k = r.top_k.unwrap_or(10);
                if !(1..=1000).contains(&top_k) {
                    return Err("pipeline step `search`: top_k must be 1..=1000".into());
                }
                StepDetail::Search {
                    api,
                    collection: r.collection,
                    top_k,
                    ef_search: r.ef_search,
                    json: r.json,
                    texts: r.texts,
                }
            }
            StepKind::Rerank => {
                if r.top_n == Some(0) {
                    return Err("pipeline step `rerank`: top_n must be at least 1".into());
                }
                StepDetail::Rerank { top_n: r.top_n }
            }
            StepKind::Chat => StepDetail::Chat {
                prompt: match &r.prompt {
                    Some(p) => ChatPrompt::parse(p)
                        .map_err(|e| format!("pipeline step `chat`: prompt: {e}"))?,
                    None => ChatPrompt::default_prompt(),
                },
                max_tokens: r.max_tokens,
            },
            StepKind::Tools => {
                let max_depth = r.max_depth.unwrap_or(1);
                if !(1..=MAX_TOOL_DEPTH).contains(&max_depth) {
                    return Err(format!(
                        "pipeline step `tools`: max_depth must be 1..={MAX_TOOL_DEPTH}"
                    ));
                }
                let endpoints = r.endpoints.unwrap_or_default();
                if endpoints.is_empty() {
                    return Err(
                        "pipeline step `tools` needs `endpoints:` (tool name -> URL or path)"
                            .into(),
                    );
                }
                StepDetail::Tools {
                    max_depth,
                    endpoints,
                }
            }
        };
        Ok(StepSpec {
            kind,
            url: r.url,
            path: r.path,
            model: r.model,
            deadline: r.deadline,
            fallback: r.fallback,
            detail,
        })
    }
}

/// What is wrong with a `fallback: {default: VALUE}` for a step of `kind`, if anything.
fn default_problem(kind: StepKind, v: &Value) -> Option<&'static str> {
    let ok = match kind {
        StepKind::Embed => v
            .as_array()
            .is_some_and(|a| !a.is_empty() && a.iter().all(Value::is_number)),
        StepKind::Search | StepKind::Rerank => {
            v.as_array().is_some_and(|a| a.iter().all(Value::is_string))
        }
        StepKind::Chat | StepKind::Tools => v.is_string(),
    };
    (!ok).then_some(match kind {
        StepKind::Embed => "fallback default must be a vector (a list of numbers)",
        StepKind::Search | StepKind::Rerank => "fallback default must be a list of document texts",
        StepKind::Chat => "fallback default must be the answer's text (a string)",
        StepKind::Tools => "fallback default must be the final answer's text (a string)",
    })
}

/// A piece of a chat step's prompt.
#[derive(Debug, Clone, PartialEq)]
pub enum PromptPart {
    /// Text, with the request template's placeholders.
    Text(Template),
    /// `${docs}`: the documents, one per line, numbered `[1]`, `[2]`, ...
    Docs,
    /// `${query}`: the task's query.
    Query,
}

/// A chat step's prompt: text around `${docs}` and `${query}`.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatPrompt {
    /// The pieces, in order.
    pub parts: Vec<PromptPart>,
}

impl ChatPrompt {
    /// Compiles `src`.
    pub fn parse(src: &str) -> Result<Self, TemplateError> {
        let mut parts = Vec::new();
        let mut rest = src;
        loop {
            let next = [
                ("${docs}", PromptPart::Docs),
                ("${query}", PromptPart::Query),
            ]
            .into_iter()
            .filter_map(|(needle, part)| rest.find(needle).map(|at| (at, needle, part)))
            .min_by_key(|(at, _, _)| *at);
            let Some((at, needle, part)) = next else {
                break;
            };
            if at > 0 {
                parts.push(PromptPart::Text(Template::parse(&rest[..at])?));
            }
            parts.push(part);
            rest = &rest[at + needle.len()..];
        }
        if !rest.is_empty() {
            parts.push(PromptPart::Text(Template::parse(rest)?));
        }
        Ok(Self { parts })
    }

    /// `Answer the question from the context.` with the documents and the query.
    #[must_use]
    pub fn default_prompt() -> Self {
        Self::parse(
            "Answer the question from the context.\n\nContext:\n${docs}\n\nQuestion: ${query}",
        )
        .expect("the default prompt compiles")
    }

    /// Whether it sends the documents.
    #[must_use]
    pub fn uses_docs(&self) -> bool {
        self.parts.contains(&PromptPart::Docs)
    }

    /// Whether a piece of it draws from the dataset.
    #[must_use]
    pub fn uses_dataset(&self) -> bool {
        self.parts
            .iter()
            .any(|p| matches!(p, PromptPart::Text(t) if t.uses_dataset()))
    }
}

impl PipelineSpec {
    /// What is wrong with the steps as a whole (order, a missing chat, a lone `tools`), if
    /// anything: one line.
    #[must_use]
    pub fn problem(&self) -> Option<String> {
        if self.steps.is_empty() {
            return Some("pipeline `steps` is empty: give at least a `chat` step".into());
        }
        for pair in self.steps.windows(2) {
            if pair[0].kind >= pair[1].kind {
                return Some(format!(
                    "pipeline step `{}` after `{}`: steps run in the order embed, search, rerank, chat, tools, each at most once",
                    pair[1].kind.name(),
                    pair[0].kind.name()
                ));
            }
        }
        let has = |k: StepKind| self.steps.iter().any(|s| s.kind == k);
        if !has(StepKind::Chat) {
            return Some("a pipeline needs a `chat` step (its answer ends the task)".into());
        }
        if has(StepKind::Rerank) && !has(StepKind::Search) {
            return Some(
                "pipeline step `rerank` needs a `search` step before it (the documents)".into(),
            );
        }
        let docs = self
            .steps
            .iter()
            .any(|s| matches!(&s.detail, StepDetail::Chat { prompt, .. } if prompt.uses_docs()));
        if docs && !has(StepKind::Search) {
            return Some(
                "the chat prompt sends `${docs}` but the pipeline has no `search` step".into(),
            );
        }
        for s in &self.steps {
            for url in s.url.iter().chain(match &s.detail {
                StepDetail::Tools { endpoints, .. } => endpoints
                    .values()
                    .filter(|u| !u.starts_with('/'))
                    .collect::<Vec<_>>(),
                _ => Vec::new(),
            }) {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Some(format!(
                        "pipeline step `{}`: {url:?} is not an http:// or https:// URL (a tool endpoint may also be a path such as /tool)",
                        s.kind.name()
                    ));
                }
            }
        }
        None
    }

    /// Whether any step's prompt draws from the dataset.
    #[must_use]
    pub fn uses_dataset(&self) -> bool {
        self.steps
            .iter()
            .any(|s| matches!(&s.detail, StepDetail::Chat { prompt, .. } if prompt.uses_dataset()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> Result<PipelineSpec, String> {
        serde_norway::from_str::<PipelineSpec>(yaml).map_err(|e| e.to_string())
    }

    #[test]
    fn a_whole_pipeline_parses() {
        let p = spec(
            "steps:\n  - {kind: embed, url: 'http://127.0.0.1:1', deadline: 200ms, fallback: skip}\n  - {kind: search, top_k: 4, fallback: {default: [a, b]}}\n  - {kind: rerank, top_n: 2}\n  - {kind: chat, prompt: 'C: ${docs} Q: ${query} n=${seq}', max_tokens: 8}\n  - {kind: tools, max_depth: 3, endpoints: {lookup: /tool}}\n",
        )
        .unwrap();
        assert_eq!(p.problem(), None);
        assert_eq!(p.steps[0].deadline, Some(Duration::from_millis(200)));
        assert_eq!(p.steps[0].fallback, Some(Fallback::Skip));
        assert_eq!(
            p.steps[1].fallback,
            Some(Fallback::Default(serde_json::json!(["a", "b"])))
        );
        let StepDetail::Chat { prompt, .. } = &p.steps[3].detail else {
            panic!("{:?}", p.steps[3]);
        };
        assert_eq!(prompt.parts.len(), 5);
        assert!(prompt.uses_docs());
        assert!(matches!(
            p.steps[4].detail,
            StepDetail::Tools { max_depth: 3, .. }
        ));
    }

    #[test]
    fn bad_steps_are_refused_in_one_line() {
        let e = spec("steps: [{kind: translate}]").unwrap_err();
        assert!(e.contains("unknown pipeline step `translate`"), "{e}");
        let e = spec("steps: [{kind: rerank, max_depth: 2}]").unwrap_err();
        assert!(e.contains("`rerank` does not take `max_depth`"), "{e}");
        let e = spec("steps: [{kind: chat, colour: red}]").unwrap_err();
        assert!(e.contains("unknown field `colour`"), "{e}");
        let e = spec("steps: [{kind: embed, fallback: {default: hello}}]").unwrap_err();
        assert!(e.contains("must be a vector"), "{e}");
        let e = spec("steps: [{kind: chat, fallback: sometimes}]").unwrap_err();
        assert!(e.contains("bad fallback `\"sometimes\"`"), "{e}");
        let e = spec("steps: [{kind: chat, fallback: {defualt: x}}]").unwrap_err();
        assert!(
            e.contains("bad fallback") && e.contains("{default: VALUE}"),
            "{e}"
        );
        let e = spec("steps: [{kind: chat, deadline: 0s}]").unwrap_err();
        assert!(e.contains("above zero"), "{e}");
        let e = spec("steps: [{kind: tools}]").unwrap_err();
        assert!(e.contains("needs `endpoints:`"), "{e}");
        let e = spec("steps: [{kind: tools, max_depth: 99, endpoints: {a: /a}}]").unwrap_err();
        assert!(e.contains("max_depth must be 1..=16"), "{e}");
        let e = spec("steps: [{kind: chat, prompt: '${nope}'}]").unwrap_err();
        assert!(e.contains("bad placeholder"), "{e}");
    }

    #[test]
    fn order_and_missing_steps_are_refused() {
        let p = spec("steps: [{kind: chat}, {kind: embed}]").unwrap();
        assert!(p.problem().unwrap().contains("`embed` after `chat`"));
        let p = spec("steps: [{kind: chat}, {kind: chat}]").unwrap();
        assert!(p.problem().unwrap().contains("each at most once"));
        let p = spec("steps: [{kind: embed}]").unwrap();
        assert!(p.problem().unwrap().contains("needs a `chat` step"));
        let p = spec("steps: [{kind: chat}]").unwrap();
        assert!(p.problem().unwrap().contains("no `search` step"));
        let p = spec("steps: [{kind: chat, prompt: '${query}'}]").unwrap();
        assert_eq!(p.problem(), None);
        let p = spec("steps: [{kind: rerank}, {kind: chat, prompt: '${query}'}]").unwrap();
        assert!(p.problem().unwrap().contains("needs a `search` step"));
        let p = spec("steps: [{kind: chat, prompt: x, url: 'ftp://h'}]").unwrap();
        assert!(p.problem().unwrap().contains("not an http://"));
    }
}

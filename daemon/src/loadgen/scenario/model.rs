//! The model a phase asks for, and what model discovery found (`engine::models` asks the
//! target; the plan keeps its answer, so a knee search's steps ask once).

use crate::loadgen::scenario::{Phase, template::JsonTemplate};
use crate::measure::record::Endpoint;

/// The `model` sent when none is given and none could be discovered.
pub const FALLBACK_MODEL: &str = "default";

/// What discovery found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Discovery {
    /// No phase calls an LLM endpoint (or the target is refused anyway): nothing was asked.
    NotNeeded,
    /// Every LLM phase names a model and the server serves it (or could not say).
    Given {
        /// The `owned_by` of the list's models (its first that has one): the engine, often.
        owned_by: Option<String>,
    },
    /// The phases that named no model now ask for `model`, the first of `served` models.
    Chosen {
        /// The model now used.
        model: String,
        /// How many models the server listed.
        served: usize,
        /// The URL asked.
        url: String,
        /// As [`Discovery::Given`]'s.
        owned_by: Option<String>,
    },
    /// `url` did not answer with a model list (`why`); phases without a model send
    /// [`FALLBACK_MODEL`].
    Unanswered {
        /// The URL asked.
        url: String,
        /// Why there is no list, on one line.
        why: String,
        /// Whether some phase named no model (then the fallback is used and worth a note).
        fallback: bool,
    },
}

impl Discovery {
    /// The model discovery chose for `phase`: `Some` only for an LLM phase that names none.
    #[must_use]
    pub fn model_for(&self, phase: &Phase) -> Option<&str> {
        match self {
            Discovery::Chosen { model, .. } if wants(phase) == Wants::Unset => Some(model),
            _ => None,
        }
    }

    /// The line to tell the user, when there is something to tell.
    #[must_use]
    pub fn note(&self) -> Option<String> {
        match self {
            Discovery::Chosen {
                model, served, url, ..
            } => Some(format!(
                "no model given; using {model:?} (the first of {served} served by {url})"
            )),
            Discovery::Unanswered {
                url,
                why,
                fallback: true,
            } => Some(format!(
                "no model given and {url} did not list one ({why}); sending model {FALLBACK_MODEL:?} (give --model)"
            )),
            _ => None,
        }
    }

    /// The `owned_by` of the server's model list, when it listed models: `vllm`, `sglang`,
    /// `llamacpp`, `inferscope-sim` say the engine.
    #[must_use]
    pub fn owned_by(&self) -> Option<&str> {
        match self {
            Discovery::Given { owned_by } | Discovery::Chosen { owned_by, .. } => {
                owned_by.as_deref()
            }
            Discovery::NotNeeded | Discovery::Unanswered { .. } => None,
        }
    }

    /// Whether the server answered with a list of models (an `OpenAI`-compatible engine).
    #[must_use]
    pub fn listed(&self) -> bool {
        matches!(self, Discovery::Given { .. } | Discovery::Chosen { .. })
    }
}

/// The `model` an LLM phase sends: its own, the one discovery chose (`found`), or
/// [`FALLBACK_MODEL`]; `None` for a phase that is not an LLM one or whose model is templated
/// (known per request only).
#[must_use]
pub fn requested_model(phase: &Phase, found: Option<&Discovery>) -> Option<String> {
    match wants(phase) {
        Wants::Named(m) => Some(m),
        Wants::Unset => Some(
            found
                .and_then(|d| d.model_for(phase))
                .unwrap_or(FALLBACK_MODEL)
                .to_owned(),
        ),
        Wants::Nothing | Wants::Templated => None,
    }
}

/// What a phase says about its model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wants {
    /// Not an LLM endpoint.
    Nothing,
    /// No model anywhere in the request.
    Unset,
    /// This model (from `model:`, or a literal `model` in `body:`).
    Named(String),
    /// A templated `model` in `body:`: known only per request.
    Templated,
}

/// What `p` says about its model.
#[must_use]
pub fn wants(p: &Phase) -> Wants {
    let r = &p.request;
    if !matches!(
        r.endpoint.unwrap_or(Endpoint::Chat),
        Endpoint::Chat | Endpoint::Completions
    ) {
        return Wants::Nothing;
    }
    // `body:` fields are merged last, so a `model` there wins over `model:`.
    if let Some(JsonTemplate::Object(fields)) = &r.body
        && let Some((_, v)) = fields.iter().rev().find(|(k, _)| k == "model")
    {
        return match v {
            JsonTemplate::Leaf(serde_json::Value::String(m)) => Wants::Named(m.clone()),
            JsonTemplate::Str(t) => t
                .literal()
                .map_or(Wants::Templated, |m| Wants::Named(m.to_string())),
            _ => Wants::Templated,
        };
    }
    r.model.clone().map_or(Wants::Unset, Wants::Named)
}

//! A session phase's description compiled once: its system prompt, its tools' services and
//! what each call's body holds.

use std::{collections::BTreeMap, sync::Arc};

use bytes::Bytes;
use hyper::Uri;
use rand::{RngCore as _, SeedableRng as _, rngs::SmallRng};
use serde_json::{Map, Value, json};

use super::history::{Entry, System, count, filler};
use crate::loadgen::{
    client::{Target, TargetError},
    scenario::{
        RequestSpec,
        dataset::Dataset,
        session::{SessionSpec, tool_urls},
        template::{Ctx, JsonTemplate, Template},
    },
};

/// Seed of the shared system prompt's words: the same text in every session.
const SYSTEM_SEED: u64 = 0x5e55_1011;

/// A session phase's description, compiled: the system prompt, the tool endpoints and what
/// each call's body holds.
#[derive(Debug)]
pub struct SessionPlan {
    pub(super) spec: SessionSpec,
    pub(super) system: System,
    /// Tool URL -> its service and URI.
    pub(super) tools: BTreeMap<String, (Target, Uri)>,
    prompt: Option<Template>,
    dataset: Option<Arc<Dataset>>,
    model: String,
    pub(super) max_tokens: Option<u32>,
    temperature: Option<JsonTemplate>,
    ignore_eos: Option<bool>,
    pub(super) stream: bool,
    body: Option<JsonTemplate>,
}

impl SessionPlan {
    /// The plan of a phase whose request is `spec` (`None` without `session:`), its tools'
    /// services resolved against `target`.
    pub fn new(
        spec: &RequestSpec,
        dataset: Option<Arc<Dataset>>,
        target: &Target,
    ) -> Result<Option<Self>, TargetError> {
        let Some(s) = &spec.session else {
            return Ok(None);
        };
        let tools = tool_urls(&s.steps)
            .into_iter()
            .map(|url| {
                let t = target.at(&url)?;
                let uri = t.uri(&Target::url_path(&url).unwrap_or_else(|| "/".into()))?;
                Ok((url, (t, uri)))
            })
            .collect::<Result<_, TargetError>>()?;
        let system = (s.system_prompt_tokens > 0).then(|| {
            let text = filler(s.system_prompt_tokens, SYSTEM_SEED);
            (Arc::from(text.as_str()), s.system_prompt_tokens)
        });
        Ok(Some(Self {
            spec: s.clone(),
            system,
            tools,
            prompt: spec.prompt.clone(),
            dataset,
            model: spec.model.clone().unwrap_or_else(|| "default".into()),
            max_tokens: spec.max_tokens,
            temperature: spec.temperature.clone(),
            ignore_eos: spec.ignore_eos,
            stream: spec.stream.unwrap_or(true),
            body: spec.body.clone(),
        }))
    }

    /// Every tool service, as its host with its URL (for the loopback guardrail).
    #[must_use]
    pub fn hosts(&self) -> Vec<(String, String)> {
        self.tools
            .iter()
            .map(|(url, (t, _))| (t.host().to_owned(), url.clone()))
            .collect()
    }

    /// A session's task: the request's prompt, the dataset row's, or made-up text.
    pub(super) fn task(&self, rng: &mut SmallRng, seq: u64) -> Entry {
        let row = self.dataset.as_ref().map(|d| d.pick(rng).clone());
        let text = match (&self.prompt, &row) {
            (Some(t), _) => t.render(&mut Ctx {
                rng,
                row: row.as_ref(),
                seq,
            }),
            (None, Some(r)) => r.prompt.clone(),
            (None, None) => {
                let n = self.spec.task_tokens;
                return Entry::user(filler(n, rng.next_u64()), n);
            }
        };
        let n = count(&text);
        Entry::user(text, n)
    }

    /// A call's body, and the `max_tokens` it asks for.
    pub(super) fn body(
        &self,
        messages: Vec<Value>,
        max_tokens: Option<u32>,
        seed: u64,
        seq: u64,
    ) -> (Bytes, Option<u32>) {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut ctx = Ctx {
            rng: &mut rng,
            row: None,
            seq,
        };
        let mut body = Map::new();
        body.insert("model".into(), json!(self.model));
        body.insert("messages".into(), Value::Array(messages));
        if let Some(n) = max_tokens {
            body.insert("max_tokens".into(), json!(n));
        }
        if let Some(t) = &self.temperature {
            body.insert("temperature".into(), t.render(&mut ctx));
        }
        if let Some(ignore) = self.ignore_eos {
            body.insert("ignore_eos".into(), json!(ignore));
        }
        body.insert("stream".into(), json!(self.stream));
        if self.stream {
            body.insert("stream_options".into(), json!({"include_usage": true}));
        }
        if let Some(Value::Object(extra)) = self.body.as_ref().map(|t| t.render(&mut ctx)) {
            body.extend(extra);
        }
        let asked = body
            .get("max_tokens")
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok());
        (Bytes::from(Value::Object(body).to_string()), asked)
    }
}

//! One step compiled: its service (the step's `url` or the target, and the path under it) and
//! what its kind needs, the chat step's request shared with the tools step.

use std::{collections::BTreeMap, sync::Arc};

use hyper::{Method, Uri};
use serde_json::Value;

use crate::loadgen::{
    client::{Target, TargetError},
    engine::vector::{ApiKind, VectorPhase},
    scenario::{
        json_path::JsonPath,
        pipeline::{ChatPrompt, Fallback, StepDetail, StepSpec},
    },
};
use crate::measure::record::StepKind;

/// Collection of the Chroma and Qdrant adapters when a search step names none.
const DEFAULT_COLLECTION: &str = "inferscope";

/// One compiled step.
#[derive(Debug)]
pub struct Step {
    /// The kind.
    pub kind: StepKind,
    /// Its service (scheme, authority, the scenario's headers and TLS).
    pub target: Target,
    pub(super) uri: Uri,
    pub(super) model: String,
    pub(super) deadline: Option<std::time::Duration>,
    pub(super) fallback: Option<Fallback>,
    /// What the kind alone needs.
    pub detail: Detail,
}

/// A compiled step's own settings.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // one per step of a phase, compiled once
pub enum Detail {
    /// `embed`.
    Embed,
    /// `search`: the vector API (completed by the vector setup before the run).
    Search {
        /// The vector settings, as a vector phase's.
        vector: VectorPhase,
        /// Where each hit's text is.
        texts: Option<JsonPath>,
    },
    /// `rerank`.
    Rerank {
        /// Documents kept.
        top_n: Option<u32>,
    },
    /// `chat`.
    Chat {
        /// The prompt.
        prompt: ChatPrompt,
        /// Where and how the chat is sent.
        call: Arc<ChatCall>,
    },
    /// `tools`.
    Tools {
        /// Rounds at most.
        max_depth: u32,
        /// Tool name -> its service and URI.
        endpoints: BTreeMap<String, (Target, Uri)>,
        /// The chat step's request, which each round's continuation is.
        call: Arc<ChatCall>,
    },
}

/// The chat step's request: its service, model, `max_tokens` and the tools it offers.
#[derive(Debug)]
pub struct ChatCall {
    pub(super) target: Target,
    pub(super) uri: Uri,
    pub(super) model: String,
    pub(super) max_tokens: Option<u32>,
    /// The function definitions offered (the `tools` step's), empty without one.
    pub(super) tools: Vec<Value>,
}

/// Where a step's requests go: its `url` (or `target`) and its path under it (the URL's own
/// path first).
pub(super) fn service(s: &StepSpec, target: &Target) -> Result<(Target, Uri), TargetError> {
    {
        let here = match &s.url {
            Some(url) => target.at(url)?,
            None => target.clone(),
        };
        let base = s
            .url
            .as_deref()
            .and_then(Target::url_path)
            .unwrap_or_default();
        let default_path = match (&s.detail, s.kind) {
            (
                StepDetail::Search {
                    api, collection, ..
                },
                _,
            ) => match api {
                ApiKind::Qdrant => format!(
                    "/collections/{}/points/search",
                    collection.as_deref().unwrap_or(DEFAULT_COLLECTION)
                ),
                ApiKind::Chroma => crate::loadgen::engine::vector::api::chroma_collections(),
                _ => "/v1/vector/search".to_owned(),
            },
            (_, StepKind::Embed) => "/v1/embeddings".to_owned(),
            (_, StepKind::Rerank) => "/v1/rerank".to_owned(),
            _ => "/v1/chat/completions".to_owned(),
        };
        let path = format!(
            "{}{}",
            base.trim_end_matches('/'),
            s.path.clone().unwrap_or(default_path)
        );
        let uri = here.uri(&path)?;
        Ok((here, uri))
    }
}

impl Step {
    pub(super) fn new(
        s: &StepSpec,
        phase: &str,
        model: &str,
        target: &Target,
        chat: &Arc<ChatCall>,
    ) -> Result<Self, TargetError> {
        let (here, uri) = service(s, target)?;
        let path = uri.path().to_owned();
        let detail = match &s.detail {
            StepDetail::Embed => Detail::Embed,
            StepDetail::Search {
                api,
                collection,
                top_k,
                ef_search,
                json,
                texts,
            } => {
                let qdrant_query = *api == ApiKind::Qdrant && path.ends_with("/points/query");
                Detail::Search {
                    vector: VectorPhase {
                        phase: format!("{phase} (pipeline step search)"),
                        api: *api,
                        method: Method::POST,
                        search: uri.clone(),
                        collection_uri: None,
                        exact_uri: None,
                        paths: json.as_ref().map_or_else(
                            || {
                                if qdrant_query {
                                    crate::loadgen::engine::vector::api::qdrant_query_paths()
                                } else {
                                    api.paths()
                                }
                            },
                            |j| crate::loadgen::scenario::body::AnswerPaths {
                                ids: j.ids.clone(),
                                scores: j.scores.clone(),
                            },
                        ),
                        json: json.clone(),
                        collection: collection
                            .clone()
                            .unwrap_or_else(|| DEFAULT_COLLECTION.to_owned()),
                        dims: None,
                        top_k: *top_k as usize,
                        ef_search: *ef_search,
                        corpus_spec: None,
                        corpus: None,
                        recall_sample: 0.0,
                        qdrant_query,
                    },
                    texts: texts.clone(),
                }
            }
            StepDetail::Rerank { top_n } => Detail::Rerank { top_n: *top_n },
            StepDetail::Chat { prompt, .. } => Detail::Chat {
                prompt: prompt.clone(),
                call: chat.clone(),
            },
            StepDetail::Tools {
                max_depth,
                endpoints,
            } => Detail::Tools {
                max_depth: *max_depth,
                endpoints: endpoints
                    .iter()
                    .map(|(name, to)| {
                        let (t, p) = if to.starts_with('/') {
                            (here.clone(), to.clone())
                        } else {
                            let t = target.at(to)?;
                            let p = Target::url_path(to).unwrap_or_else(|| "/".into());
                            (t, p)
                        };
                        let uri = t.uri(&p)?;
                        Ok((name.clone(), (t, uri)))
                    })
                    .collect::<Result<_, TargetError>>()?,
                call: chat.clone(),
            },
        };
        Ok(Self {
            kind: s.kind,
            target: here,
            uri,
            model: s.model.clone().unwrap_or_else(|| model.to_owned()),
            deadline: s.deadline,
            fallback: s.fallback.clone(),
            detail,
        })
    }
}

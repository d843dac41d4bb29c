//! A pipeline phase's checks: its request holds only what a pipeline uses, and its steps fit.

use crate::loadgen::{client::check_path, scenario::Phase};

/// What is wrong with a pipeline phase (`request.pipeline`), if anything: the request holds
/// only what a pipeline uses (its query, model, headers and check), and the steps fit.
pub(super) fn pipeline_problem(p: &Phase) -> Option<String> {
    let Some(pipe) = &p.request.pipeline else {
        return None;
    };
    let r = &p.request;
    let misplaced = [
        ("endpoint", r.endpoint.is_some()),
        ("path", r.path.is_some()),
        ("method", r.method.is_some()),
        ("max_tokens", r.max_tokens.is_some()),
        ("temperature", r.temperature.is_some()),
        ("stream", r.stream.is_some()),
        ("ignore_eos", r.ignore_eos.is_some()),
        ("body", r.body.is_some()),
        ("text", r.text.is_some()),
        ("dimensions", r.dimensions.is_some()),
        ("top_k", r.top_k.is_some()),
        ("ef_search", r.ef_search.is_some()),
        ("recall_sample", r.recall_sample.is_some()),
        ("exact_path", r.exact_path.is_some()),
        ("api", r.api.is_some()),
        ("collection", r.collection.is_some()),
        ("json", r.json.is_some()),
        ("corpus", r.corpus.is_some()),
        ("low_recall", r.low_recall.is_some()),
        ("rebuild_below", r.rebuild_below.is_some()),
        ("conversation", r.conversation.is_some()),
        ("retry", r.retry.is_some()),
    ];
    if let Some((field, _)) = misplaced.iter().find(|(_, given)| *given) {
        return Some(format!(
            "`request.{field}` does not apply to a pipeline: set it on a step, or drop it (a pipeline's request takes prompt, dataset, model, headers, check and pipeline)"
        ));
    }
    if p.sweep.is_some()
        || p.max_tokens_per_s.is_some()
        || p.chaos != crate::loadgen::scenario::ChaosSpec::default()
    {
        return Some(
            "a pipeline phase takes no `sweep`, `max_tokens_per_s` or `chaos`: drop them".into(),
        );
    }
    if let Some(why) = pipe.problem() {
        return Some(why);
    }
    for s in &pipe.steps {
        let tool_paths = match &s.detail {
            crate::loadgen::scenario::pipeline::StepDetail::Tools { endpoints, .. } => endpoints
                .values()
                .filter(|u| u.starts_with('/'))
                .collect::<Vec<_>>(),
            _ => Vec::new(),
        };
        for path in s.path.iter().chain(tool_paths) {
            if let Err(e) = check_path(path) {
                return Some(format!("pipeline step `{}`: {e}", s.kind.name()));
            }
        }
    }
    None
}

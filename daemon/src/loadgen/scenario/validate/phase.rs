//! One phase's checks, one after the other, each with its own message: its paths, dataset,
//! rate, ramp, the pipeline, session and replay, the vector-only fields, caps and LLM extras;
//! and its trace file read. Its ranges (duration, users, caps) are `limits::check`'s.

use std::{collections::BTreeMap, path::Path, sync::Arc};

use super::llm::{caps_problem, llm_extras_problem};
use super::pipeline::pipeline_problem;
use super::vector::vector_problem;
use crate::loadgen::{
    client::check_path,
    scenario::dataset::Dataset,
    scenario::files::Files,
    scenario::shape::Load,
    scenario::template::Template,
    scenario::trace::{self, Parsed, TraceSpec},
    scenario::{HARD_MAX_RATE, Phase, ScenarioError},
};
use crate::measure::record::Endpoint;

/// Checks one phase and reads its trace file.
#[allow(clippy::too_many_lines)] // one check after the other, each with its own message
pub(super) fn check_phase(
    p: &mut Phase,
    loaded: &BTreeMap<String, Arc<Dataset>>,
    files: Files<'_>,
    err: &dyn Fn(&str, String) -> ScenarioError,
) -> Result<(), ScenarioError> {
    let at = format!("name: {}", p.name);
    check_paths(p, err)?;
    if let Some(ds) = &p.request.dataset
        && !loaded.contains_key(ds)
    {
        return Err(err(
            &format!("dataset: {ds}"),
            format!(
                "phase `{}` uses dataset `{ds}`, which `datasets:` does not define",
                p.name
            ),
        ));
    }
    let uses = p
        .request
        .prompt
        .as_ref()
        .is_some_and(Template::uses_dataset)
        || p.request.text.as_ref().is_some_and(Template::uses_dataset)
        || p.request
            .pipeline
            .as_ref()
            .is_some_and(crate::loadgen::scenario::pipeline::PipelineSpec::uses_dataset);
    if uses && p.request.dataset.is_none() {
        return Err(err(
            &at,
            format!(
                "phase `{}` uses ${{dataset.*}} but sets no `request.dataset`",
                p.name
            ),
        ));
    }
    if let Load::Trace {
        path,
        spec,
        offsets,
        replay,
    } = &mut p.load
    {
        let parsed = read_trace(files, path, spec).map_err(|e| match e.line {
            Some(_) => e,
            None => err(&at, format!("phase `{}`: {}", p.name, e.msg)),
        })?;
        // The rows sent before the phase's end (where its schedule stops) are the replay.
        let sent = parsed.offsets.partition_point(|o| *o <= p.duration);
        *replay = parsed.replay.map(|r| Arc::new(r.keep(sent)));
        *offsets = parsed.offsets;
    }
    if let Some(rate) = p
        .load
        .target_rate(p.duration)
        .filter(|r| *r > HARD_MAX_RATE)
    {
        return Err(err(
            &at,
            format!(
                "phase `{}`: rate {rate}/s is above the hard cap {HARD_MAX_RATE}/s",
                p.name
            ),
        ));
    }
    if let Some(why) = p.ramp_up.and_then(|r| {
        let closed = match p.load {
            Load::Concurrency { users } => Some(users),
            _ => None,
        };
        r.problem(p.duration, closed)
    }) {
        return Err(err(&at, format!("phase `{}`: {why}", p.name)));
    }
    if let Some(why) = pipeline_problem(p)
        .or_else(|| crate::loadgen::scenario::session::problem(p))
        .or_else(|| crate::loadgen::scenario::replay::problem(p))
    {
        return Err(err(&at, format!("phase `{}`: {why}", p.name)));
    }
    let endpoint = p.request.endpoint.unwrap_or(Endpoint::Chat);
    let r = &p.request;
    let vector_only = r.text.is_some()
        || r.dimensions.is_some()
        || r.top_k.is_some()
        || r.ef_search.is_some()
        || r.recall_sample.is_some()
        || r.api.is_some()
        || r.collection.is_some()
        || r.json.is_some()
        || r.corpus.is_some()
        || r.low_recall.is_some()
        || r.rebuild_below.is_some()
        || p.sweep.is_some();
    if vector_only && endpoint != Endpoint::VectorSearch {
        return Err(err(
            &at,
            format!(
                "phase `{}`: text/dimensions/top_k/ef_search/recall_sample/api/collection/json/corpus/sweep need `endpoint: vector_search`",
                p.name
            ),
        ));
    }
    if let Some(why) = caps_problem(p, endpoint) {
        return Err(err(&at, format!("phase `{}`: {why}", p.name)));
    }
    if let Some(why) = llm_extras_problem(p, endpoint, loaded) {
        return Err(err(&at, format!("phase `{}`: {why}", p.name)));
    }
    if endpoint == Endpoint::VectorSearch
        && let Some((needle, why)) = vector_problem(p)
    {
        return Err(err(
            needle.as_deref().unwrap_or(&at),
            format!("phase `{}`: {why}", p.name),
        ));
    }
    Ok(())
}

/// Every path of a phase (request, ground truth, events) must be absolute: glued to the base
/// URL, `@host/` would name another host.
fn check_paths(
    p: &Phase,
    err: &dyn Fn(&str, String) -> ScenarioError,
) -> Result<(), ScenarioError> {
    let paths = p
        .request
        .path
        .iter()
        .chain(&p.request.exact_path)
        .chain(p.chaos.stampede.iter().flat_map(|s| &s.reset))
        .chain(p.events.iter().map(|e| &e.path));
    for path in paths {
        check_path(path).map_err(|e| err(path, format!("phase `{}`: {e}", p.name)))?;
    }
    Ok(())
}

/// Reads a trace file; errors carry the trace file's own line.
fn read_trace(files: Files<'_>, name: &Path, spec: &TraceSpec) -> Result<Parsed, ScenarioError> {
    let (full, text) = files.read(name).map_err(|msg| ScenarioError {
        file: name.display().to_string(),
        line: None,
        msg: format!("trace: {msg}"),
    })?;
    let file = full.display().to_string();
    trace::parse(&text, spec).map_err(|e| ScenarioError {
        line: e.line.map(|l| (l, 1)),
        msg: match e.line {
            Some(_) => e.msg,
            None => format!("trace {file}: {}", e.msg),
        },
        file,
    })
}

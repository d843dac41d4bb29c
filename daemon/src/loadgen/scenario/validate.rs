//! Loading a scenario: YAML parsing with `FILE:LINE:COLUMN` errors, cross-field checks,
//! datasets and trace files, and the custom field parsers the schema uses.

use std::{collections::BTreeMap, path::Path, sync::Arc};

use rand::{SeedableRng, rngs::SmallRng};
use serde::{Deserialize, Deserializer, de::Error as _};

use crate::loadgen::{
    client::check_path,
    scenario::check::Check,
    scenario::dataset::Dataset,
    scenario::files::Files,
    scenario::limits,
    scenario::shape::Load,
    scenario::template::{JsonTemplate, Template},
    scenario::trace::{self, Parsed, TraceSpec},
    scenario::{HARD_MAX_IN_FLIGHT, HARD_MAX_RATE, Origin, Phase, Scenario, ScenarioError},
};

use crate::measure::{record::Endpoint, slo::Slo};

/// What resolving a scenario produced besides the scenario itself.
pub(super) struct Resolved {
    /// The datasets, loaded.
    pub datasets: BTreeMap<String, Arc<Dataset>>,
    /// Per phase, its compiled `request.check`.
    pub checks: Vec<Option<Arc<Check>>>,
}

impl Scenario {
    /// Reads and parses a scenario file (not yet validated: [`super::plan::Plan`] does that).
    pub fn read(path: &Path) -> Result<Self, ScenarioError> {
        let file = path.display().to_string();
        let src = std::fs::read_to_string(path).map_err(|e| ScenarioError {
            file: file.clone(),
            line: None,
            msg: format!("cannot read scenario: {e}"),
        })?;
        Self::parse_yaml(&src, &file)
    }

    /// Parses YAML text into the raw scenario, not yet checked across fields nor resolved:
    /// [`super::plan::Plan::compile`] applies the flags over it, then validates it.
    pub fn parse_yaml(src: &str, file: &str) -> Result<Self, ScenarioError> {
        let mut s: Self = serde_norway::from_str(src).map_err(|e| {
            let mut msg = e.to_string();
            // serde_norway appends " at line L column C"; we print the location up front.
            if let Some(i) = msg.find(" at line ") {
                msg.truncate(i);
            }
            if msg.contains("missing field `duration`") {
                msg.push_str(" (every phase needs one, e.g. `duration: 60s`)");
            }
            let line = e
                .location()
                .map(|l| refine(src, (l.line(), l.column()), &msg));
            ScenarioError {
                file: file.to_string(),
                line,
                msg,
            }
        })?;
        s.origin = Origin {
            file: file.to_string(),
            text: Arc::from(src),
        };
        Ok(s)
    }

    /// Cross-field checks, sweeps, datasets, trace files and task checks, once.
    pub(super) fn resolve(&mut self, files: Files<'_>) -> Result<Resolved, ScenarioError> {
        let origin = self.origin.clone();
        let err = |needle: &str, msg: String| ScenarioError {
            file: origin.file.clone(),
            line: line_of(&origin.text, needle),
            msg,
        };
        if self.phases.is_empty() {
            return Err(err(
                "phases",
                "`phases` is empty: add at least one phase".into(),
            ));
        }
        if self.max_in_flight == 0 || self.max_in_flight > HARD_MAX_IN_FLIGHT {
            return Err(err(
                "max_in_flight",
                format!("max_in_flight must be 1..={HARD_MAX_IN_FLIGHT}"),
            ));
        }

        let mut rng = SmallRng::seed_from_u64(self.seed.unwrap_or(0));
        let mut datasets = BTreeMap::new();
        for (name, spec) in &self.datasets {
            let ds = Dataset::load(spec, files, &mut rng)
                .map_err(|e| err(&format!("{name}:"), format!("dataset `{name}`: {e}")))?;
            datasets.insert(name.clone(), Arc::new(ds));
        }
        expand_sweeps(&mut self.phases).map_err(|(needle, msg)| err(&needle, msg))?;
        let mut seen = std::collections::BTreeSet::new();
        let mut checks = Vec::with_capacity(self.phases.len());
        for p in &mut self.phases {
            if !seen.insert(p.name.clone()) {
                return Err(err(
                    &format!("name: {}", p.name),
                    format!("phase name `{}` is used twice", p.name),
                ));
            }
            check_phase(p, &datasets, files, &err)?;
            let check = p.request.check.as_ref().map(Check::compile).transpose();
            checks.push(
                check
                    .map_err(|why| {
                        err(
                            &format!("name: {}", p.name),
                            format!("phase `{}`: {why}", p.name),
                        )
                    })?
                    .map(Arc::new),
            );
        }
        // Cross-field ranges (an event after its phase's end) and a second look at the rest.
        limits::check(self).map_err(|msg| err("phases", msg))?;
        Ok(Resolved { datasets, checks })
    }

    /// The target's host, for the loopback guardrail.
    #[must_use]
    pub fn target_host(&self) -> Option<String> {
        let uri: hyper::Uri = self.target.parse().ok()?;
        uri.host()
            .map(|h| h.trim_start_matches('[').trim_end_matches(']').to_string())
    }

    /// Port of the target (80 or 443 when an `http://` or `https://` URL names none);
    /// `None` for other schemes or an unparseable URL.
    #[must_use]
    pub fn target_port(&self) -> Option<u16> {
        let uri: hyper::Uri = self.target.parse().ok()?;
        match (uri.scheme_str(), uri.port_u16()) {
            (Some("http"), port) => Some(port.unwrap_or(80)),
            (Some("https"), port) => Some(port.unwrap_or(443)),
            _ => None,
        }
    }
}

/// Checks one phase and reads its trace file.
#[allow(clippy::too_many_lines)] // one check after the other, each with its own message
fn check_phase(
    p: &mut Phase,
    loaded: &BTreeMap<String, Arc<Dataset>>,
    files: Files<'_>,
    err: &dyn Fn(&str, String) -> ScenarioError,
) -> Result<(), ScenarioError> {
    let at = format!("name: {}", p.name);
    check_paths(p, err)?;
    if p.duration.is_zero() {
        return Err(err(
            &at,
            format!("phase `{}`: duration must be > 0", p.name),
        ));
    }
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
            .is_some_and(super::pipeline::PipelineSpec::uses_dataset);
    if uses && p.request.dataset.is_none() {
        return Err(err(
            &at,
            format!(
                "phase `{}` uses ${{dataset.*}} but sets no `request.dataset`",
                p.name
            ),
        ));
    }
    match &mut p.load {
        Load::Concurrency { users } if *users == 0 || *users > HARD_MAX_IN_FLIGHT => {
            return Err(err(
                &at,
                format!("phase `{}`: users must be 1..={HARD_MAX_IN_FLIGHT}", p.name),
            ));
        }
        Load::Trace {
            path,
            spec,
            offsets,
            replay,
        } => {
            let parsed = read_trace(files, path, spec).map_err(|e| match e.line {
                Some(_) => e,
                None => err(&at, format!("phase `{}`: {}", p.name, e.msg)),
            })?;
            // The rows sent before the phase's end (where its schedule stops) are the replay.
            let sent = parsed.offsets.partition_point(|o| *o <= p.duration);
            *replay = parsed.replay.map(|r| Arc::new(r.keep(sent)));
            *offsets = parsed.offsets;
        }
        _ => {}
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
        .or_else(|| super::session::problem(p))
        .or_else(|| super::replay::problem(p))
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

/// What is wrong with a pipeline phase (`request.pipeline`), if anything: the request holds
/// only what a pipeline uses (its query, model, headers and check), and the steps fit.
fn pipeline_problem(p: &Phase) -> Option<String> {
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
    if p.sweep.is_some() || p.max_tokens_per_s.is_some() || p.chaos != super::ChaosSpec::default() {
        return Some(
            "a pipeline phase takes no `sweep`, `max_tokens_per_s` or `chaos`: drop them".into(),
        );
    }
    if let Some(why) = pipe.problem() {
        return Some(why);
    }
    for s in &pipe.steps {
        let tool_paths = match &s.detail {
            super::pipeline::StepDetail::Tools { endpoints, .. } => endpoints
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

/// What is wrong with a phase's caps, if anything: the caps must hold for every request of it.
fn caps_problem(p: &Phase, endpoint: Endpoint) -> Option<String> {
    if p.max_tokens_per_s.is_some() {
        if !matches!(endpoint, Endpoint::Chat | Endpoint::Completions) {
            return Some(
                "`max_tokens_per_s` caps the output tokens requests ask for: it needs an LLM endpoint (chat or completions)"
                    .into(),
            );
        }
        let in_body = matches!(&p.request.body, Some(JsonTemplate::Object(fields))
            if fields.iter().any(|(k, _)| k == "max_tokens"));
        if p.request.max_tokens.is_none() && !in_body {
            return Some(
                "`max_tokens_per_s` counts the tokens each request asks for: set `request.max_tokens`"
                    .into(),
            );
        }
    }
    if p.when_capped == super::CapPolicy::Drop && matches!(p.load, Load::Concurrency { .. }) {
        return Some(
            "`when_capped: drop` drops open-loop arrivals; a closed loop (`concurrency`) waits for its caps: drop `when_capped`"
                .into(),
        );
    }
    None
}

/// What is wrong with a vector phase's API settings, if anything (and the text to point at).
fn vector_problem(p: &Phase) -> Option<(Option<String>, String)> {
    use super::vector::ApiKind;
    let r = &p.request;
    let api = r.api.unwrap_or_default();
    let here = |s: &str| Some(s.to_string());
    if let Some(c) = &r.corpus
        && let Some(why) = c.problem()
    {
        return Some((here("corpus"), why));
    }
    if api == ApiKind::Sim && r.corpus.is_some() {
        return Some((
            here("corpus"),
            "the sim serves its own fixed corpus: drop `corpus:` (recall comes from `exact_path`) or set `api:`".into(),
        ));
    }
    if (api == ApiKind::Json) != r.json.is_some() {
        return Some((
            here("json"),
            "`api: json` and a `json:` block (body, ids) go together".into(),
        ));
    }
    if api == ApiKind::Json && r.path.is_none() {
        return Some((
            None,
            "`api: json` needs `path:` (where to POST the body)".into(),
        ));
    }
    if api == ApiKind::Json && r.body.is_some() {
        return Some((
            here("body"),
            "`api: json` takes its whole body from `json.body`: drop `body:`".into(),
        ));
    }
    if let Some(j) = &r.json {
        use crate::loadgen::scenario::body::Var;
        if !j.body.uses(Var::Vector) && !j.body.uses(Var::Text) {
            return Some((
                here("json"),
                "`json.body` sends neither `${vector}` nor `${text}`".into(),
            ));
        }
        if j.body.uses(Var::Text) != r.text.is_some() {
            return Some((
                here("json"),
                "`${text}` in `json.body` and `text:` go together".into(),
            ));
        }
        if let Some(ins) = &j.insert
            && let Err(e) = check_path(&ins.path)
        {
            return Some((here(&ins.path), e.to_string()));
        }
    }
    if matches!(api, ApiKind::Chroma | ApiKind::Qdrant) && r.text.is_some() {
        return Some((
            here("text"),
            format!(
                "the {} API takes vectors, not text: use `dimensions:` or `corpus:`",
                api.name()
            ),
        ));
    }
    if api == ApiKind::Chroma && r.collection.as_ref().is_some_and(|c| c.len() < 3) {
        return Some((
            here("collection"),
            "a Chroma collection name has 3 to 512 characters".into(),
        ));
    }
    if let Some(c) = &r.collection
        && (c.is_empty()
            || !c
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)))
    {
        return Some((
            here("collection"),
            "a collection name is letters, digits, `-`, `_` and `.`".into(),
        ));
    }
    if api == ApiKind::Json && r.text.is_none() && r.dimensions.is_none() && r.corpus.is_none() {
        return Some((
            None,
            "an `api: json` request needs `text:`, `dimensions:` or `corpus:`".into(),
        ));
    }
    if r.top_k.is_some_and(|k| !(1..=1000).contains(&k)) {
        return Some((here("top_k"), "top_k must be 1..=1000".into()));
    }
    None
}

/// Each phase with `sweep:` becomes one phase per value, named `NAME@ef<N>`.
fn expand_sweeps(phases: &mut Vec<Phase>) -> Result<(), (String, String)> {
    if phases.iter().all(|p| p.sweep.is_none()) {
        return Ok(());
    }
    let mut out = Vec::with_capacity(phases.len());
    for p in phases.drain(..) {
        let Some(sweep) = p.sweep.clone() else {
            out.push(p);
            continue;
        };
        if sweep.ef_search.is_empty() || sweep.ef_search.contains(&0) {
            return Err((
                "sweep".into(),
                format!(
                    "phase `{}`: sweep ef_search needs values above 0, e.g. [16, 32, 64, 128, 256]",
                    p.name
                ),
            ));
        }
        if p.request.ef_search.is_some() {
            return Err((
                "sweep".into(),
                format!(
                    "phase `{}`: `ef_search:` and `sweep: {{ef_search}}` both set it: drop one",
                    p.name
                ),
            ));
        }
        for ef in sweep.ef_search {
            let mut step = p.clone();
            step.name = format!("{}@ef{ef}", p.name);
            step.label.get_or_insert_with(|| p.name.clone());
            step.request.ef_search = Some(ef);
            step.sweep = None;
            step.sweep_of = Some(p.name.clone());
            out.push(step);
        }
    }
    *phases = out;
    Ok(())
}

/// What is wrong with a phase's `conversation:` or `check:`, if anything.
fn llm_extras_problem(
    p: &Phase,
    endpoint: Endpoint,
    loaded: &BTreeMap<String, Arc<Dataset>>,
) -> Option<String> {
    use super::limits::{MAX_SYSTEM_WORDS, MAX_TURNS};
    if let Some(c) = &p.request.conversation {
        if endpoint != Endpoint::Chat {
            return Some(
                "`conversation:` needs `endpoint: chat` (a history is a list of messages)".into(),
            );
        }
        if !(1..=MAX_TURNS).contains(&c.turns) {
            return Some(format!("conversation turns must be 1..={MAX_TURNS}"));
        }
        if c.logprobs.is_some_and(|k| !(1..=20).contains(&k)) {
            return Some("conversation logprobs (top_logprobs per token) must be 1..=20".into());
        }
        if c.system_prompt_words.is_some_and(|w| w > MAX_SYSTEM_WORDS) {
            return Some(format!(
                "conversation system_prompt_words must be at most {MAX_SYSTEM_WORDS}"
            ));
        }
        let recorded = p
            .request
            .dataset
            .as_ref()
            .and_then(|d| loaded.get(d))
            .is_some_and(|d| d.has_conversations());
        if c.reply == crate::loadgen::scenario::ReplySource::Recorded && !recorded {
            return Some(
                "`reply: recorded` needs a ShareGPT dataset with replies (`request.dataset`)"
                    .into(),
            );
        }
    }
    if let Some(r) = &p.request.retry {
        if !(1..=10).contains(&r.max) {
            return Some("retry max (retries after the first attempt) must be 1..=10".into());
        }
        if r.on.is_empty() {
            return Some("retry on: name at least one of connect, 5xx, timeout".into());
        }
    }
    if p.request.check.is_some() && !matches!(endpoint, Endpoint::Chat | Endpoint::Completions) {
        return Some("`check:` needs an LLM endpoint (chat or completions)".into());
    }
    if let Some(st) = &p.chaos.stampede {
        if !matches!(endpoint, Endpoint::Chat | Endpoint::Completions) {
            return Some("`chaos.stampede` needs an LLM endpoint (chat or completions)".into());
        }
        if p.request.conversation.is_some() {
            return Some("`chaos.stampede` sends single requests: drop `conversation:`".into());
        }
        if !(2..=super::limits::MAX_STAMPEDE).contains(&st.size) {
            return Some(format!(
                "chaos.stampede size must be 2..={}",
                super::limits::MAX_STAMPEDE
            ));
        }
        if st.every.is_zero() || st.every >= p.duration {
            return Some(
                "chaos.stampede every must be above 0s and below the phase's duration".into(),
            );
        }
    }
    None
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

/// `serde_norway` places our own validation errors at the start of the enclosing mapping;
/// when the message quotes the offending text, point at that text instead.
fn refine(src: &str, at: (usize, usize), msg: &str) -> (usize, usize) {
    let serde_own = [
        "missing field",
        "unknown field",
        "invalid type",
        "invalid value",
        "did not find",
        "unknown variant",
    ];
    if serde_own.iter().any(|p| msg.contains(p)) {
        return at;
    }
    let quoted = msg
        .split_once(['"', '`'])
        .and_then(|(_, rest)| rest.split_once(['"', '`']))
        .map(|(q, _)| q);
    let Some(q) = quoted.filter(|q| !q.is_empty()) else {
        return at;
    };
    src.lines()
        .enumerate()
        .skip(at.0.saturating_sub(1))
        .take(200)
        .find_map(|(i, l)| l.find(q).map(|c| (i + 1, c + 1)))
        .unwrap_or(at)
}

fn line_of(src: &str, needle: &str) -> Option<(usize, usize)> {
    src.lines()
        .enumerate()
        .find_map(|(i, l)| l.find(needle).map(|c| (i + 1, c + 1)))
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RatioRepr {
    Num(f64),
    Text(String),
}

pub(crate) fn de_ratio<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let repr = RatioRepr::deserialize(d)?;
    let text = match &repr {
        RatioRepr::Num(v) => v.to_string(),
        RatioRepr::Text(t) => t.clone(),
    };
    let v = match repr {
        RatioRepr::Num(v) => v,
        RatioRepr::Text(t) => t
            .trim()
            .strip_suffix('%')
            .and_then(|p| p.trim().parse::<f64>().ok())
            .map(|p| p / 100.0)
            .ok_or_else(|| D::Error::custom(format!("bad fraction {t:?}: write 0.1 or 10%")))?,
    };
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(D::Error::custom(format!(
            "fraction `{text}` is not within 0..1 (0%..100%)"
        )))
    }
}

pub(crate) fn de_opt_ratio<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    de_ratio(d).map(Some)
}

pub(crate) fn de_opt_template<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Template>, D::Error> {
    let s = String::deserialize(d)?;
    Template::parse(&s).map(Some).map_err(D::Error::custom)
}

pub(crate) fn de_opt_json_template<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<JsonTemplate>, D::Error> {
    let v = serde_json::Value::deserialize(d)?;
    JsonTemplate::compile(&v)
        .map(Some)
        .map_err(D::Error::custom)
}

pub(crate) fn de_slos<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Slo>, D::Error> {
    Vec::<String>::deserialize(d)?
        .iter()
        .map(|s| Slo::parse(s).map_err(D::Error::custom))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_target(target: &str) -> Scenario {
        let src = format!(
            "target: {target}\nphases:\n  - name: p\n    duration: 1s\n    load: {{shape: constant, rate: 1}}\n"
        );
        super::super::plan::Plan::from_yaml(&src, "t.yaml", Path::new("."))
            .unwrap()
            .scenario()
            .clone()
    }

    fn plan_error(request: &str) -> String {
        phase_error(&format!("    request:\n{request}"))
    }

    #[test]
    fn pipeline_phases_are_checked_in_one_line() {
        let steps = "      pipeline:\n        steps:\n          - {kind: search}\n          - {kind: chat}\n";
        assert_eq!(plan_error(steps), "");
        let e = plan_error(&format!("      max_tokens: 9\n{steps}"));
        assert!(
            e.starts_with("t.yaml:")
                && e.contains("`request.max_tokens` does not apply to a pipeline"),
            "{e}"
        );
        let e = plan_error(&format!("      endpoint: vector_search\n{steps}"));
        assert!(e.contains("`request.endpoint` does not apply"), "{e}");
        let e = plan_error(&format!("      conversation: {{turns: 2}}\n{steps}"));
        assert!(e.contains("`request.conversation` does not apply"), "{e}");
        let e = plan_error(
            "      pipeline:\n        steps:\n          - {kind: chat}\n          - {kind: search}\n",
        );
        assert!(e.contains("steps run in the order"), "{e}");
        let e = plan_error(
            "      pipeline:\n        steps:\n          - {kind: chat, prompt: x, path: 'nope'}\n",
        );
        assert!(e.contains("pipeline step `chat`: bad path"), "{e}");
        let e = plan_error(
            "      pipeline:\n        steps:\n          - {kind: search, fallback: {default: 3}}\n          - {kind: chat}\n",
        );
        assert!(
            e.contains("t.yaml:") && e.contains("list of document texts"),
            "{e}"
        );
        let e = plan_error(
            "      pipeline:\n        steps:\n          - {kind: chat, prompt: '${dataset.prompt} ${query}'}\n",
        );
        assert!(e.contains("no `request.dataset`"), "{e}");
        assert!(!e.contains('\n'), "one line: {e}");
    }

    /// The error of a 5 s phase with these extra lines (empty when it compiles).
    fn phase_error(lines: &str) -> String {
        let src = format!(
            "target: http://127.0.0.1:1\nphases:\n  - name: p\n    duration: 5s\n    load: {{shape: constant, rate: 1}}\n{lines}"
        );
        super::super::plan::Plan::from_yaml(&src, "t.yaml", Path::new("."))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    }

    #[test]
    fn a_stampede_is_checked_in_one_line() {
        let ok = "    chaos: {stampede: {size: 8, every: 1s, reset: /reset_prefix_cache}}\n";
        assert_eq!(phase_error(ok), "");
        for (lines, says) in [
            (
                "    chaos: {stampede: {size: 1, every: 1s}}\n",
                "chaos.stampede size must be 2..=10000",
            ),
            (
                "    chaos: {stampede: {size: 4, every: 5s}}\n",
                "every must be above 0s and below the phase's duration",
            ),
            (
                "    chaos: {stampede: {size: 4, every: 1s, reset: 'x'}}\n",
                "bad path",
            ),
            (
                "    chaos: {stampede: {size: 4, every: 1s, flush: /x}}\n",
                "unknown field `flush`",
            ),
            (
                "    request: {endpoint: vector_search, dimensions: 8}\n    chaos: {stampede: {size: 4, every: 1s}}\n",
                "`chaos.stampede` needs an LLM endpoint",
            ),
            (
                "    request: {conversation: {turns: 2}}\n    chaos: {stampede: {size: 4, every: 1s}}\n",
                "drop `conversation:`",
            ),
        ] {
            let e = phase_error(lines);
            assert!(e.starts_with("t.yaml") && e.contains(says), "{lines}: {e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
    }

    #[test]
    fn target_port_of_urls() {
        assert_eq!(
            with_target("http://127.0.0.1:8000").target_port(),
            Some(8000)
        );
        assert_eq!(with_target("http://localhost:9/v1").target_port(), Some(9));
        assert_eq!(with_target("http://vllm/").target_port(), Some(80));
        assert_eq!(with_target("https://vllm:8443").target_port(), Some(8443));
        assert_eq!(with_target("https://vllm").target_port(), Some(443));
        assert_eq!(with_target("ftp://vllm").target_port(), None);
    }
}

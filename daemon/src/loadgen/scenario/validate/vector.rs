//! A vector phase's checks: its API settings (corpus, `json:`, text or vectors, collection
//! name, `top_k`) and the text to point at.

use crate::loadgen::{client::check_path, scenario::Phase};

/// What is wrong with a vector phase's API settings, if anything (and the text to point at).
pub(super) fn vector_problem(p: &Phase) -> Option<(Option<String>, String)> {
    use crate::loadgen::scenario::vector::ApiKind;
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

//! Which model to ask for: before a run, `GET {target}/v1/models` (what vLLM's bench and
//! guidellm do). LLM phases that name no model get the first model served; a model named but
//! not served fails the run before it starts, listing what is served. A target that does not
//! answer (or not with the `OpenAI` list) changes nothing: phases without a model send
//! `FALLBACK_MODEL`. Vector-search and plain-HTTP phases need no model, and a scenario
//! made only of them asks nothing.
//!
//! The engine asks once per plan, as it sets up the first run of it ([`super::run`]): a model
//! not served ends that run with [`super::RunError::Model`] before any request; the note of
//! what was chosen goes where [`super::Options::notes`] says.
//!
//! ```no_run
//! # async fn demo(plan: inferscope::loadgen::Plan) -> Result<(), Box<dyn std::error::Error>> {
//! use inferscope::loadgen::{Options, engine::models};
//! let found = models::discover(plan.scenario(), &Options::new()).await?;
//! if let Some(line) = found.note() {
//!     eprintln!("inferscope: {line}");
//! }
//! # Ok(()) }
//! ```

use std::{fmt::Write as _, time::Duration};

use http_body_util::{BodyExt as _, Limited};
use hyper::Method;

use super::Options;
use crate::dial::Reach;
use crate::loadgen::{
    client::{Target, build_client},
    scenario::Scenario,
    scenario::model::{Discovery, Wants, wants},
    scenario::plan::Plan,
};

/// Where the `OpenAI` API lists its models.
pub const MODELS_PATH: &str = "/v1/models";
/// The longest wait for `/v1/models` (less when the scenario's timeout is shorter).
pub const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest `/v1/models` answer read.
const MAX_LIST_BYTES: usize = 4 << 20;

/// A model the scenario names that the target does not serve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "model {model:?} is not served by {url} (it serves {}); give --model (or `model:` in the scenario) one of them",
    quoted(served)
)]
pub struct ModelNotServed {
    /// The model asked for.
    pub model: String,
    /// The URL asked.
    pub url: String,
    /// What the server lists.
    pub served: Vec<String>,
}

fn quoted(names: &[String]) -> String {
    const SHOWN: usize = 20;
    let mut s = names
        .iter()
        .take(SHOWN)
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN {
        let _ = write!(s, " and {} more", names.len() - SHOWN);
    }
    s
}

/// [`discover`] once per plan (a knee search's steps share their base's, and a caller that
/// gathers the run's provenance first asks for the run): what was chosen is said the first
/// time, where `opts` says.
pub async fn discover_once<'p>(
    plan: &'p Plan,
    opts: &Options,
) -> Result<&'p Discovery, ModelNotServed> {
    plan.models()
        .get_or_try_init(|| async {
            let found = discover(plan.scenario(), opts).await?;
            if let Some(line) = found.note() {
                opts.notes.say(&line);
            }
            Ok(found)
        })
        .await
}

/// Asks the target for its models when an LLM phase needs one, chooses the model of the phases
/// that name none ([`Discovery::model_for`]), and checks the ones that do. Connects as the run
/// will (`opts`: loopback guardrail, TLS), with the scenario's headers.
pub async fn discover(scenario: &Scenario, opts: &Options) -> Result<Discovery, ModelNotServed> {
    let asks: Vec<Wants> = scenario.phases.iter().map(wants).collect();
    if asks
        .iter()
        .all(|w| matches!(w, Wants::Nothing | Wants::Templated))
    {
        return Ok(Discovery::NotNeeded);
    }
    // A target the run will refuse (not loopback, a bad URL, an unusable TLS setup) is not
    // asked either: the run says why.
    if scenario.target.within(opts.reach).is_err() {
        return Ok(Discovery::NotNeeded);
    }
    let Ok(target) =
        Target::of(&scenario.target, &scenario.headers).and_then(|t| t.with_tls(&opts.tls))
    else {
        return Ok(Discovery::NotNeeded);
    };
    let url = format!("{}{MODELS_PATH}", scenario.target.base());
    let fallback = asks.contains(&Wants::Unset);
    let timeout = scenario.timeout.min(DISCOVERY_TIMEOUT);
    let (served, owned_by) = match list(&target, opts.reach, timeout).await {
        Ok(list) if !list.0.is_empty() => list,
        Ok(_) => {
            let why = "the list is empty".to_string();
            return Ok(Discovery::Unanswered { url, why, fallback });
        }
        Err(why) => return Ok(Discovery::Unanswered { url, why, fallback }),
    };
    for w in &asks {
        if let Wants::Named(m) = w
            && !served.contains(m)
        {
            return Err(ModelNotServed {
                model: m.clone(),
                url,
                served,
            });
        }
    }
    if !fallback {
        return Ok(Discovery::Given { owned_by });
    }
    Ok(Discovery::Chosen {
        model: served[0].clone(),
        served: served.len(),
        url,
        owned_by,
    })
}

/// GETs the model list: the ids in `data`, in the server's order, and their `owned_by`.
/// Errors are one line.
async fn list(
    target: &Target,
    reach: Reach,
    timeout: Duration,
) -> Result<(Vec<String>, Option<String>), String> {
    let client = build_client(target, timeout, reach);
    let req = target
        .request(&Method::GET, MODELS_PATH, bytes::Bytes::new(), &[])
        .map_err(|e| e.to_string())?;
    let ask = async {
        let resp = client.request(req).await.map_err(|e| {
            crate::tls::ConnectError::tls_in(&e).map_or_else(
                || crate::loadgen::client::error_chain(&e),
                ToString::to_string,
            )
        })?;
        let status = resp.status();
        let body = Limited::new(resp.into_body(), MAX_LIST_BYTES)
            .collect()
            .await
            .map_err(|e| format!("reading the answer: {e}"))?
            .to_bytes();
        if !status.is_success() {
            return Err(format!("HTTP {}", status.as_u16()));
        }
        parse(&body)
    };
    tokio::time::timeout(timeout, ask)
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "no answer within {}",
                humantime::format_duration(timeout)
            ))
        })
}

/// The model ids of an `OpenAI` list answer (`{"object": "list", "data": [{"id": ..}, ..]}`)
/// and the first `owned_by` it gives.
fn parse(body: &[u8]) -> Result<(Vec<String>, Option<String>), String> {
    let v: serde_json::Value =
        serde_json::from_slice(body).map_err(|_| "the answer is not JSON".to_string())?;
    let data = v
        .get("data")
        .and_then(serde_json::Value::as_array)
        .ok_or_else(|| "the answer has no `data` list".to_string())?;
    let text = |m: &serde_json::Value, k: &str| m.get(k)?.as_str().map(str::to_string);
    Ok((
        data.iter().filter_map(|m| text(m, "id")).collect(),
        data.iter()
            .find_map(|m| text(m, "owned_by"))
            .filter(|o| !o.is_empty()),
    ))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::loadgen::scenario::model::requested_model;

    fn scenario(target: &str, request: &str) -> Scenario {
        let yaml = format!(
            "target: {target}\nphases:\n  - name: p\n    duration: 1s\n    load: {{shape: constant, rate: 1}}\n    request: {request}\n"
        );
        crate::loadgen::Plan::from_yaml(&yaml, "t.yaml", Path::new("."))
            .unwrap()
            .scenario()
            .clone()
    }

    #[test]
    fn lists_parse_and_what_phases_want() {
        assert_eq!(
            parse(br#"{"object":"list","data":[{"id":"a"},{"id":"b","owned_by":"vllm"}]}"#)
                .unwrap(),
            (
                vec!["a".to_owned(), "b".to_owned()],
                Some("vllm".to_owned())
            )
        );
        assert!(parse(b"<html>").unwrap_err().contains("not JSON"));
        assert!(parse(b"{}").unwrap_err().contains("`data`"));
        let t = "http://127.0.0.1:9";
        assert_eq!(
            wants(&scenario(t, "{endpoint: chat}").phases[0]),
            Wants::Unset
        );
        assert_eq!(
            wants(&scenario(t, "{model: m}").phases[0]),
            Wants::Named("m".into())
        );
        assert_eq!(
            wants(&scenario(t, "{model: m, body: {model: n}}").phases[0]),
            Wants::Named("n".into())
        );
        assert_eq!(
            wants(&scenario(t, "{body: {model: '${choice(a,b)}'}}").phases[0]),
            Wants::Templated
        );
        assert_eq!(
            wants(&scenario(t, "{endpoint: http, path: /health}").phases[0]),
            Wants::Nothing
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_sims_model_is_found_checked_and_a_dead_target_changes_nothing() {
        let mut cfg = crate::sim::profile("healthy").unwrap();
        cfg.vector.corpus_size = 10;
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let sim = crate::sim::start(cfg, l).await.unwrap();
        let url = sim.url();

        let s = scenario(&url, "{endpoint: completions}");
        let found = discover(&s, &Options::new()).await.unwrap();
        assert_eq!(found.model_for(&s.phases[0]), Some("inferscope-sim"));
        let named = scenario(&url, "{model: inferscope-sim}");
        assert_eq!(found.model_for(&named.phases[0]), None);
        let note = found.note().unwrap();
        assert!(
            note.contains("using \"inferscope-sim\" (the first of 1 served by"),
            "{note}"
        );

        let s = scenario(&url, "{model: inferscope-sim}");
        let given = discover(&s, &Options::new()).await.unwrap();
        assert_eq!(
            given,
            Discovery::Given {
                owned_by: Some("inferscope-sim".into())
            }
        );
        assert_eq!(
            requested_model(&s.phases[0], Some(&given)).as_deref(),
            Some("inferscope-sim")
        );

        let s = scenario(&url, "{model: llama}");
        let e = discover(&s, &Options::new()).await.unwrap_err().to_string();
        assert!(e.starts_with("model \"llama\" is not served by"), "{e}");
        assert!(e.contains("(it serves \"inferscope-sim\")"), "{e}");

        let s = scenario(&url, "{endpoint: http, path: /health}");
        assert_eq!(
            discover(&s, &Options::new()).await,
            Ok(Discovery::NotNeeded)
        );
        sim.shutdown().await.unwrap();

        // Nothing listens any more: the run goes on as before, with a note.
        let s = scenario(&url, "{endpoint: chat}");
        let found = discover(&s, &Options::new()).await.unwrap();
        assert!(
            matches!(found, Discovery::Unanswered { fallback: true, .. }),
            "{found:?}"
        );
        assert_eq!(found.model_for(&s.phases[0]), None);
        assert!(found.note().unwrap().contains("sending model \"default\""));
    }
}

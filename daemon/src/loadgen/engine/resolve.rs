//! What every request of a run needs, checked and resolved before anything is sent: the
//! target and its client, the model, each phase's compiled request, the vector phases' corpus
//! and ground truth, and the run's provenance.

use std::sync::Arc;

use crate::clock::{self};

use rand::{SeedableRng as _, rngs::SmallRng};

use crate::loadgen::{
    client::{HttpClient, Target, build_client, us_since},
    engine::request::PhaseCtx,
    engine::tally::Msg,
    engine::vector::{ApiKind, setup, truth::Truth},
    scenario::plan::Plan,
};

use crate::measure::{provenance::Provenance, report::EventRecord};

use super::{Options, RunError, Shared, models, pipeline, provenance, session};

/// What every request of a run needs, checked and resolved before anything is sent.
pub(super) struct Setup {
    pub(super) target: Target,
    pub(super) client: HttpClient,
    /// Per phase, the URIs of its events.
    pub(super) event_uris: Vec<Vec<hyper::Uri>>,
    /// Per phase, its compiled request (vector phases completed by their setup).
    pub(super) ctxs: Vec<Arc<PhaseCtx>>,
    /// The client-side recall ground truth (phases with a corpus).
    pub(super) truth: Option<Truth>,
    /// The run's provenance: the caller's ([`Options::provenance`]), else gathered here.
    pub(super) provenance: Provenance,
    /// The seed of the run's draws (the provenance's).
    pub(super) seed: u64,
}

impl Setup {
    pub(super) async fn new(plan: &Plan, opts: &Options) -> Result<Self, RunError> {
        let scenario = plan.scenario();
        scenario.target.within(opts.reach)?;
        // Once per plan (a knee search's steps share their base's): a model the target does
        // not serve ends the run here, not in N failed requests.
        let models = models::discover_once(plan, opts).await?;
        let target = Target::of(&scenario.target, &scenario.headers)?.with_tls(&opts.tls)?;
        let event_uris = scenario
            .phases
            .iter()
            .map(|p| {
                p.events
                    .iter()
                    .map(|e| target.uri(&e.path))
                    .collect::<Result<Vec<_>, _>>()
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut ctxs = scenario
            .phases
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let mut p = std::borrow::Cow::Borrowed(p);
                if let Some(model) = models.model_for(&p) {
                    p.to_mut().request.model = Some(model.to_owned());
                }
                PhaseCtx::new(i as u32, &p, plan, &target)
            })
            .collect::<Result<Vec<_>, _>>()?;
        ctxs.iter()
            .filter_map(|c| c.pipeline.as_ref())
            .flat_map(pipeline::Pipeline::hosts)
            .chain(
                ctxs.iter()
                    .filter_map(|c| c.session.as_deref())
                    .flat_map(session::plan::SessionPlan::hosts),
            )
            .try_for_each(|(host, url)| opts.reach.admits(&host, &url))?;
        let client = build_client(&target, scenario.timeout, opts.reach);
        vector_setup(&mut ctxs, &client, &target, scenario.seed).await?;
        let truth = if ctxs
            .iter()
            .any(|c| c.vector.as_ref().is_some_and(|v| v.corpus.is_some()))
        {
            Some(Truth::start().map_err(|e| {
                RunError::Internal(format!("starting the recall ground-truth thread: {e}"))
            })?)
        } else {
            None
        };
        let provenance = match &opts.provenance {
            Some(p) => p.clone(),
            // Boxed: probes and NVML make a large future, which runs once per run.
            None => Box::pin(provenance::gather(plan, opts)).await?,
        };
        Ok(Self {
            target,
            client,
            event_uris,
            ctxs: ctxs.into_iter().map(Arc::new).collect(),
            truth,
            seed: provenance.seed.unwrap_or_else(clock::unix_ns),
            provenance,
        })
    }
}

/// Chroma sets `ef_search` on the collection, not per query: a Chroma phase with one sets it
/// as it starts (a sweep's steps one after the other). The change is an event of the phase.
pub(super) async fn chroma_ef_search(
    shared: &Arc<Shared>,
    phase: u32,
    v: &crate::loadgen::engine::vector::VectorPhase,
) {
    let (Some(ef), Some(uri)) = (v.ef_search, v.collection_uri.clone()) else {
        return;
    };
    let at_us = us_since(shared.t0);
    let http = setup::Http {
        client: &shared.client,
        target: &shared.target,
        headers: &[],
    };
    let outcome = match setup::chroma_set_ef(&http, uri, ef).await {
        Ok(()) => "HTTP 200".to_string(),
        Err(e) => e.to_string(),
    };
    let _ = shared
        .tx
        .send(Msg::Event(EventRecord {
            phase,
            request: format!("PUT chroma collection `{}` ef_search={ef}", v.collection),
            at_us,
            end_us: us_since(shared.t0),
            outcome,
        }))
        .await;
}

/// Completes every vector phase before the run (collections, corpora, dimensions) and sends
/// each one test query; nothing here is timed.
async fn vector_setup(
    ctxs: &mut [PhaseCtx],
    client: &HttpClient,
    target: &Target,
    seed: Option<u64>,
) -> Result<(), RunError> {
    let mut setup = setup::Setup::default();
    for ctx in ctxs.iter_mut() {
        // A pipeline's search step sends the vector its embed step gave (the service checks
        // it); only a Chroma collection's id must be known before the run. A service that is
        // down is the step's failure (and its fallback's cue), not the run's.
        let headers = ctx.headers().to_vec();
        for step in ctx.pipeline.iter_mut().flat_map(|p| p.steps.iter_mut()) {
            let http = setup::Http {
                client,
                target: &step.target,
                headers: &headers,
            };
            if let pipeline::Detail::Search { vector, .. } = &mut step.detail
                && vector.api == ApiKind::Chroma
            {
                setup.phase(vector, &http, seed, true).await?;
            }
        }
        let text = ctx.text_queries();
        let headers = ctx.headers().to_vec();
        let http = setup::Http {
            client,
            target,
            headers: &headers,
        };
        let Some(v) = ctx.vector.as_mut() else {
            continue;
        };
        setup.phase(v, &http, seed, text).await?;
        // The sim's answer is known (and its dimension checked above); any other API gets a
        // test query, so that a body or path that does not fit fails here, in one line.
        if v.api == ApiKind::Sim {
            continue;
        }
        let probe = ctx.prepare(&mut SmallRng::seed_from_u64(0), 0, None);
        if let Some(v) = &ctx.vector {
            setup::preflight(v, &http, probe.body).await?;
        }
    }
    Ok(())
}

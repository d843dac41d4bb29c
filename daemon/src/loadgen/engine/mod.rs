//! The engine: one tokio task per request (no thread per user), one dispatcher per phase
//! sleeping until absolute deadlines computed up front, caps on in-flight requests and
//! requested tokens/s, per-request timeouts, and a grace period on cancellation.
//!
//! Latency is measured from the *intended* start: a request held back by a cap or a
//! late timer still has its clock running (coordinated omission handled), and the gap
//! shows separately as send lag.

pub mod barrier;
pub mod caps;
pub mod complexity;
pub mod conversation;
pub mod models;
pub mod observe;
pub mod pipeline;
pub mod progress;
pub mod provenance;
pub mod request;
pub mod session;
mod stampede;
pub mod tally;
pub mod vector;

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use std::panic::AssertUnwindSafe;

use crate::clock::{self, RunClock};
use crate::dial::is_loopback;

use futures_util::FutureExt as _;
use hyper::Method;
use rand::{RngCore as _, SeedableRng as _, rngs::SmallRng};
use tokio::{
    sync::{Semaphore, mpsc},
    time::Instant,
};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::loadgen::{
    client::{HttpClient, OwnConn, Target, TargetError, Via, build_client, us_since},
    engine::caps::{Permits, PhaseCaps, Taken},
    engine::complexity::Shaper,
    engine::conversation::Conversation,
    engine::request::{Executed, PhaseCtx, Prepared},
    engine::tally::Msg,
    engine::vector::{ApiKind, setup, truth::Pending, truth::Truth},
    scenario::arrival::Schedule,
    scenario::plan::Plan,
    scenario::{Load, Phase, Scenario},
};
use crate::measure::steady;
use crate::measure::vector_health as health;

use crate::measure::{
    provenance::Provenance,
    record::{Endpoint, ErrorClass, RequestRecord},
    report::{
        EventRecord, PhaseInfo, PhaseReport, RampView, SCHEMA, Stop, StopKind, StressReport,
        VERSION, VectorInfo,
    },
    shard::Shard,
    trace_context::{TraceContext, TraceId},
};

/// How late after its phase's end an arrival due before it may still be sent (timer and
/// scheduling jitter); a dispatcher or runtime further behind drops what it has not sent.
pub const END_SLACK: Duration = Duration::from_millis(100);
/// Messages queued between the request tasks and the collector (about 300 bytes each).
const MSG_QUEUE: usize = 16_384;
/// Default [`Options::records_budget`]: 256 MiB of records (about 600,000 short requests).
pub const RECORDS_BUDGET: usize = 256 << 20;

/// How to run a scenario. `Options::default()` keeps records, allows only loopback
/// targets, has no observer and draws no progress line.
#[derive(Debug, Clone)]
pub struct Options {
    /// Allow targets outside loopback.
    pub allow_remote: bool,
    /// Keep request records in the report.
    pub keep_records: bool,
    /// Bytes of records kept at most (estimated, [`RequestRecord::footprint`]); records
    /// past it are counted in `StressReport::records_overflow`, not kept.
    pub records_budget: usize,
    /// Receives each finished request record as it completes (a slow receiver slows the
    /// collector, never the requests).
    pub observer: Option<mpsc::Sender<RequestRecord>>,
    /// Draw the live progress line on stderr.
    pub progress: bool,
    /// This process's share of the load (`--shard i/N`); [`Shard::WHOLE`] for all of it.
    pub shard: Shard,
    /// Whom an `https://` target's certificate must come from (`--ca-file`, `--insecure`).
    pub tls: crate::tls::TlsOptions,
    /// A fault the engine injects into itself, for tests of its failure handling; `None` in
    /// every real run.
    pub fault: Option<Fault>,
    /// Where the run's notes go (the model discovery chose, ...).
    pub notes: Notes,
    /// A common start with other shards (`--start-at`): the run waits for it after its setup.
    pub start_at: Option<barrier::StartAt>,
    /// The run's provenance, gathered beforehand ([`provenance::gather`]) by a caller that
    /// needs it before the run (the OTLP resource); the run gathers it itself otherwise.
    pub provenance: Option<Provenance>,
}

/// Where a run's notes go: what it chose for the user (the model when none was given), said
/// once before the first request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Notes {
    /// The log (`tracing`, level info): the daemon's runs.
    #[default]
    Log,
    /// Standard error, one line each, `inferscope: ` first: the command line.
    Stderr,
}

impl Notes {
    /// Says `line`.
    pub fn say(self, line: &str) {
        match self {
            Notes::Log => tracing::info!("{line}"),
            Notes::Stderr => eprintln!("inferscope: {line}"),
        }
    }
}

/// A fault the engine injects into itself (see [`Options::fault`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The first phase's dispatcher panics as it takes request number `request` (0-based).
    DispatcherPanic {
        /// The request it panics on.
        request: u64,
    },
}

impl Default for Options {
    fn default() -> Self {
        Options {
            allow_remote: false,
            keep_records: true,
            records_budget: RECORDS_BUDGET,
            observer: None,
            progress: false,
            shard: Shard::WHOLE,
            tls: crate::tls::TlsOptions::default(),
            fault: None,
            notes: Notes::Log,
            start_at: None,
            provenance: None,
        }
    }
}

impl Options {
    /// Same as [`Options::default`].
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }
}

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A non-loopback target without permission.
    #[error("target {0} is not a loopback address: pass --allow-remote to load a remote service")]
    Remote(String),
    /// The target URL or a header is unusable.
    #[error(transparent)]
    Target(#[from] TargetError),
    /// A model the scenario names is not served by the target (nothing was sent).
    #[error(transparent)]
    Model(#[from] models::ModelNotServed),
    /// The run's own machinery failed (a bug): the message says where.
    #[error("internal error: {0}")]
    Internal(String),
    /// A vector phase's setup failed (seeding, dimension, a test query): what to do.
    #[error(transparent)]
    Vector(#[from] vector::errors::SetupError),
}

struct Shared {
    client: HttpClient,
    target: Target,
    t0: std::time::Instant,
    timeout: Duration,
    allow_remote: bool,
    shard: Shard,
    hard_stop: CancellationToken,
    tx: mpsc::Sender<Msg>,
    global: Arc<Semaphore>,
    seq: AtomicU64,
    /// The client-side recall ground truth (phases with a corpus).
    truth: Option<Truth>,
    /// [`Options::fault`].
    fault: Option<Fault>,
    /// The trace id of the requests outside a conversation; `None`: no trace headers.
    trace: Option<TraceId>,
}

impl Shared {
    /// A new trace id for a conversation (or a session) of the run: `None` when the run sends
    /// no trace headers.
    fn new_trace(&self) -> Option<TraceId> {
        self.trace.map(|_| TraceId::random())
    }
}

/// Runs every phase of `plan` and returns the report. Cancelling `cancel` stops sending at
/// once; requests in flight get the scenario's `grace` to finish, then are aborted.
///
/// The stages: `Setup::new` checks and resolves what every request needs (the model too), the
/// tally starts, `dispatch` sends the phases, `drain` waits for the requests in flight, and
/// the tally's totals become the report.
pub async fn run(
    plan: &Plan,
    mut opts: Options,
    cancel: CancellationToken,
) -> Result<StressReport, RunError> {
    let setup = Setup::new(plan, &opts).await?;
    let scenario = plan.scenario();
    if let Some(start) = opts.start_at {
        barrier::meet(start, &cancel, opts.notes).await;
    }
    let share = opts.shard;
    say_default_ramps(scenario, opts.notes);
    let mut rng = SmallRng::seed_from_u64(share.seed(setup.seed));
    // Bounded: a tally that falls behind slows the senders instead of queueing records
    // without limit.
    let (tx, rx) = mpsc::channel(MSG_QUEUE);
    let tally = tokio::spawn(tally::run(
        rx,
        tally_config(scenario, &mut opts),
        cancel.clone(),
    ));
    let started = RunClock::start();
    let shared = Arc::new(Shared {
        client: setup.client,
        truth: setup.truth,
        fault: opts.fault,
        allow_remote: opts.allow_remote,
        shard: share,
        target: setup.target,
        t0: started.t0,
        timeout: scenario.timeout,
        hard_stop: CancellationToken::new(),
        tx,
        global: Arc::new(Semaphore::new(scenario.max_in_flight)),
        seq: AtomicU64::new(0),
        trace: setup.provenance.trace_id,
    });
    let tracker = TaskTracker::new();
    let mut elapsed = vec![0.0; scenario.phases.len()];
    // A panic while dispatching ends the run as failed, with the report of what was done:
    // the tally and the requests in flight outlive the dispatcher.
    let dispatched = AssertUnwindSafe(dispatch(
        scenario,
        &shared,
        &setup.ctxs,
        &setup.event_uris,
        &mut rng,
        &mut elapsed,
        &tracker,
        &cancel,
    ))
    .catch_unwind()
    .await;
    let failed = dispatched.err().map(|p| {
        // Closed-loop users stop too.
        cancel.cancel();
        Stop::new(
            StopKind::Failed,
            format!("internal error while sending: {}", panic_message(&*p)),
        )
    });
    drain(&tracker, &cancel, scenario.grace, &shared.hard_stop).await;
    let run_elapsed = shared.t0.elapsed().as_secs_f64();
    drop(shared);
    let tallied = tally
        .await
        .map_err(|e| RunError::Internal(format!("the tally failed: {e}")))?;
    let phases = phase_reports(scenario, &tallied, &elapsed, &setup.ctxs, share);
    let stopped = failed.or(tallied.abort).or_else(|| {
        cancel.is_cancelled().then(|| {
            Stop::new(
                StopKind::Interrupted,
                "a signal, or cancelled by the caller",
            )
        })
    });
    Ok(StressReport {
        schema: SCHEMA.into(),
        version: VERSION,
        scenario: scenario.name.clone(),
        target: scenario.target.clone(),
        shard: (share != Shard::WHOLE).then_some(share),
        started_unix_ns: started.unix_ns,
        started_monotonic_ns: started.monotonic_ns,
        elapsed_s: run_elapsed,
        slo_pass: crate::measure::report::slo_pass(&phases),
        stopped,
        phases,
        events: tallied.events,
        records: tallied.records,
        records_overflow: tallied.records_overflow,
        run: Some(setup.provenance),
    })
}

/// The report of each phase: its metrics (`tallied`), its ramp and its steady state.
fn phase_reports(
    scenario: &Scenario,
    tallied: &tally::Collected,
    elapsed: &[f64],
    ctxs: &[Arc<PhaseCtx>],
    share: Shard,
) -> Vec<PhaseReport> {
    scenario
        .phases
        .iter()
        .zip(&tallied.metrics)
        .zip(elapsed)
        .zip(ctxs)
        .enumerate()
        .map(|(i, (((p, m), el), ctx))| {
            let mut r = PhaseReport::build(&phase_info(p, ctx, *el, share), m);
            r.ramp = p.ramp().map(|(ramp, default)| {
                let secs = ramp.duration.as_secs_f64();
                RampView::new(secs, ramp.strategy.name(), default, ramp.count, m)
            });
            let mine: Vec<&RequestRecord> = tallied
                .records
                .iter()
                .filter(|r| r.phase as usize == i)
                .collect();
            let users = match p.load {
                Load::Concurrency { users } => Some(users),
                _ => None,
            };
            r.steady = steady::of_phase(&mine, users);
            r
        })
        .collect()
}

/// Says, for each closed-loop phase that gets the default ramp of large user counts, that it
/// does and how to change it.
fn say_default_ramps(scenario: &Scenario, notes: Notes) {
    for p in &scenario.phases {
        if let (Some((r, true)), Load::Concurrency { users }) = (p.ramp(), &p.load) {
            notes.say(&format!(
                "phase `{}`: {users} users start over a {} linear ramp (the default from {} users: {} a second, at most a quarter of the phase; set `ramp_up:` to change it, `ramp_up: 0s` for none); requests started during it are reported apart, not in the phase's percentiles",
                p.name,
                humantime::format_duration(r.duration),
                crate::loadgen::scenario::ramp::DEFAULT_FROM_USERS,
                crate::loadgen::scenario::ramp::DEFAULT_USERS_PER_S,
            ));
        }
    }
}

/// What every request of a run needs, checked and resolved before anything is sent.
struct Setup {
    target: Target,
    client: HttpClient,
    /// Per phase, the URIs of its events.
    event_uris: Vec<Vec<hyper::Uri>>,
    /// Per phase, its compiled request (vector phases completed by their setup).
    ctxs: Vec<Arc<PhaseCtx>>,
    /// The client-side recall ground truth (phases with a corpus).
    truth: Option<Truth>,
    /// The run's provenance: the caller's ([`Options::provenance`]), else gathered here.
    provenance: Provenance,
    /// The seed of the run's draws (the provenance's).
    seed: u64,
}

impl Setup {
    async fn new(plan: &Plan, opts: &Options) -> Result<Self, RunError> {
        let scenario = plan.scenario();
        let host = scenario
            .target_host()
            .ok_or_else(|| TargetError::Url(scenario.target.clone()))?;
        if !opts.allow_remote && !is_loopback(&host) {
            return Err(RunError::Remote(scenario.target.clone()));
        }
        // Once per plan (a knee search's steps share their base's): a model the target does
        // not serve ends the run here, not in N failed requests.
        let models = models::discover_once(plan, opts).await?;
        let target = Target::new(&scenario.target, &scenario.headers)?.with_tls(&opts.tls)?;
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
        if !opts.allow_remote {
            let remote = ctxs
                .iter()
                .filter_map(|c| c.pipeline.as_ref())
                .flat_map(pipeline::Pipeline::hosts)
                .chain(
                    ctxs.iter()
                        .filter_map(|c| c.session.as_deref())
                        .flat_map(session::SessionPlan::hosts),
                )
                .find(|(host, _)| !is_loopback(host));
            if let Some((_, url)) = remote {
                return Err(RunError::Remote(url));
            }
        }
        let client = build_client(&target, scenario.timeout, opts.allow_remote);
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

/// What the tally needs to know of the run (it takes the observer).
fn tally_config(scenario: &Scenario, opts: &mut Options) -> tally::Config {
    let share = opts.shard;
    tally::Config {
        phases: scenario
            .phases
            .iter()
            .map(|p| {
                (
                    p.name.clone(),
                    p.duration.as_secs_f64(),
                    p.load.target_rate(p.duration).map(|r| share.rate(r)),
                )
            })
            .collect(),
        keep_records: opts.keep_records,
        records_budget: opts.records_budget,
        observer: opts.observer.take(),
        progress: opts.progress,
        abort: scenario
            .abort_error_rate
            .map(|r| (r, scenario.abort_min_requests)),
    }
}

/// Waits for the requests in flight; once the run is cancelled they get `grace`, then
/// `hard_stop` aborts them.
async fn drain(
    tracker: &TaskTracker,
    cancel: &CancellationToken,
    grace: Duration,
    hard_stop: &CancellationToken,
) {
    tracker.close();
    tokio::select! {
        () = tracker.wait() => {}
        () = async { cancel.cancelled().await; tokio::time::sleep(grace).await } => {
            hard_stop.cancel();
            tracker.wait().await;
        }
    }
}

/// The text of a panic payload.
#[must_use]
pub fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(ToString::to_string)
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".into())
}

/// Sends every phase in turn; `elapsed` gets each phase's sending time.
#[allow(clippy::too_many_arguments)]
async fn dispatch(
    scenario: &Scenario,
    shared: &Arc<Shared>,
    ctxs: &[Arc<PhaseCtx>],
    event_uris: &[Vec<hyper::Uri>],
    rng: &mut SmallRng,
    elapsed: &mut [f64],
    tracker: &TaskTracker,
    cancel: &CancellationToken,
) {
    let share = shared.shard;
    let mut phase_start = Instant::now();
    for (i, (phase, ctx)) in scenario.phases.iter().zip(ctxs).enumerate() {
        if cancel.is_cancelled() {
            break;
        }
        let start_us = phase_start
            .into_std()
            .saturating_duration_since(shared.t0)
            .as_micros() as u64;
        let _ = shared
            .tx
            .send(Msg::PhaseStart(i as u32, phase_start, start_us))
            .await;
        let end = phase_start + phase.duration;
        if let Some(v) = &ctx.vector {
            chroma_ef_search(shared, i as u32, v).await;
        }
        for (ev, uri) in phase.events.iter().zip(&event_uris[i]) {
            tracker.spawn(event(
                shared.clone(),
                i as u32,
                ev.clone(),
                uri.clone(),
                phase_start + ev.at,
                cancel.clone(),
            ));
        }
        let caps = Arc::new(PhaseCaps::new(
            shared.global.clone(),
            phase.max_in_flight,
            phase.max_tokens_per_s,
            phase.when_capped,
            end,
        ));
        if let Some(spec) = &phase.chaos.stampede {
            tracker.spawn(stampede::run(
                shared.clone(),
                ctx.clone(),
                caps.clone(),
                spec.clone(),
                phase_start,
                rng.next_u64(),
                tracker.clone(),
                cancel.clone(),
            ));
        }
        let scheduled = if let Some(a) = phase.load.arrival() {
            let offsets = share.schedule(&a, phase.duration, rng);
            open_loop(
                shared,
                ctx,
                phase,
                &caps,
                offsets,
                phase_start,
                rng,
                tracker,
                cancel,
            )
            .await
        } else {
            let users = if let Load::Concurrency { users } = phase.load {
                share.users(users)
            } else {
                0
            };
            // A ramp starts user k at its offset; the requests started before the ramp's end
            // are marked (unless the scenario counts them) and reported apart.
            let ramp = phase.ramp().map(|(r, _)| r);
            let ramp_end = ramp.filter(|r| !r.count).map(|r| phase_start + r.duration);
            for k in 0..users {
                let rng = SmallRng::seed_from_u64(rng.next_u64());
                let (shared, ctx, caps) = (shared.clone(), ctx.clone(), caps.clone());
                let start = phase_start + ramp.map_or(Duration::ZERO, |r| r.start_of(k, users));
                let at = Start {
                    at: start,
                    ramp_end,
                };
                tracker.spawn(user(shared, ctx, caps, rng, at, cancel.clone()));
            }
            0
        };
        tokio::select! { () = tokio::time::sleep_until(end) => {}, () = cancel.cancelled() => {} }
        let _ = shared.tx.send(Msg::Scheduled(i as u32, scheduled)).await;
        elapsed[i] = Instant::now()
            .min(end)
            .duration_since(phase_start)
            .as_secs_f64();
        // The next phase starts at this one's planned end: no drift across phases.
        phase_start = end;
    }
}

fn phase_info(p: &Phase, ctx: &PhaseCtx, elapsed_s: f64, shard: Shard) -> PhaseInfo {
    PhaseInfo {
        name: p.name.clone(),
        label: p.label.clone().unwrap_or_else(|| p.name.clone()),
        endpoint: if ctx.pipeline.is_some() {
            "pipeline".into()
        } else {
            ctx.endpoint.label().into()
        },
        // The label names the scenario's load level, the same on every shard, so that
        // shards' series line up; the target rate is this shard's share.
        load_level: p.load.level(),
        target_rate: p.load.target_rate(p.duration).map(|r| shard.rate(r)),
        duration_s: p.duration.as_secs_f64(),
        elapsed_s,
        slos: p.slo.clone(),
        retry_t_max_ms: p
            .request
            .retry
            .as_ref()
            .map(crate::loadgen::scenario::retry::RetrySpec::t_max_ms),
        vector: ctx.vector.as_ref().map(|v| VectorInfo {
            ef_search: v.ef_search,
            sweep_of: p.sweep_of.clone(),
            low_recall: p.request.low_recall.unwrap_or(health::LOW_RECALL),
            rebuild_below: p.request.rebuild_below.unwrap_or(health::REBUILD_BELOW),
        }),
        prefix: p.load.prefix_sharing(),
    }
}

/// Chroma sets `ef_search` on the collection, not per query: a Chroma phase with one sets it
/// as it starts (a sweep's steps one after the other). The change is an event of the phase.
async fn chroma_ef_search(
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

/// Open loop: sleep to each absolute deadline, apply the caps, spawn the request.
#[allow(clippy::too_many_arguments, clippy::too_many_lines)] // one arrival's story, in order
async fn open_loop(
    shared: &Arc<Shared>,
    ctx: &Arc<PhaseCtx>,
    phase: &Phase,
    caps: &Arc<PhaseCaps>,
    mut offsets: Schedule<SmallRng>,
    start: Instant,
    rng: &mut SmallRng,
    tracker: &TaskTracker,
    cancel: &CancellationToken,
) -> u64 {
    let mut scheduled = 0;
    // Nothing is sent after the phase's end, whether a cap held it back or the dispatcher
    // itself fell behind: the next phase starts on time, and the arrivals not sent by then
    // count as scheduled and dropped.
    let end = caps.end();
    // At the phase's end: the arrival in hand (already counted as scheduled) and those not
    // taken yet are dropped.
    let overrun = async |left_after: usize, scheduled: &mut u64| {
        let left = left_after as u64 + 1;
        *scheduled += left - 1;
        let _ = shared.tx.send(Msg::Dropped(ctx.index, left)).await;
    };
    let mut shaper = phase
        .load
        .complexity_shaping()
        .then(|| Shaper::new(phase.duration));
    while let Some(off) = offsets.next() {
        // Complexity shaping renders the request before its gap, which its score stretches.
        let mut early = None;
        let off = match &mut shaper {
            Some(shaper) => {
                let seq = shared.seq.fetch_add(1, Ordering::Relaxed);
                let Some((conv, prepared)) = first_request(ctx, rng, seq, Some(offsets.taken()))
                else {
                    continue;
                };
                let score = complexity::of_request(&prepared.body).score;
                let Some(off) = shaper.next(off, score) else {
                    break;
                };
                early = Some((seq, conv, prepared));
                off
            }
            None => off,
        };
        let deadline = start + off;
        tokio::select! { () = tokio::time::sleep_until(deadline) => {}, () = cancel.cancelled() => break }
        scheduled += 1;
        if Instant::now() >= end + END_SLACK {
            overrun(offsets.remaining(), &mut scheduled).await;
            break;
        }
        if ctx.session.is_some() {
            // A session counts its calls as scheduled as it sends them (`session.rs`).
            scheduled -= 1;
            let rng = SmallRng::seed_from_u64(rng.next_u64());
            let run = session::arrival(
                shared.clone(),
                ctx.clone(),
                caps.clone(),
                rng,
                deadline,
                cancel.clone(),
            );
            tracker.spawn(run);
            continue;
        }
        let (seq, conv, prepared) = if let Some(e) = early {
            e
        } else {
            let seq = shared.seq.fetch_add(1, Ordering::Relaxed);
            if let Some(Fault::DispatcherPanic { request }) = shared.fault {
                assert!(!(ctx.index == 0 && seq == request), "injected panic");
            }
            let Some((conv, prepared)) = first_request(ctx, rng, seq, Some(offsets.taken())) else {
                continue;
            };
            (seq, conv, prepared)
        };
        let permits = match caps.take(prepared.max_tokens, cancel).await {
            Taken::Send(p) => p,
            Taken::Dropped => {
                let _ = shared.tx.send(Msg::Dropped(ctx.index, 1)).await;
                continue;
            }
            Taken::Ended => {
                overrun(offsets.remaining(), &mut scheduled).await;
                break;
            }
            Taken::Cancelled => break,
        };
        let intended = deadline
            .into_std()
            .saturating_duration_since(shared.t0)
            .as_micros() as u64;
        let mut rec = RequestRecord::new(seq, ctx.index, ctx.endpoint, intended);
        // A conversation's turns share a trace of their own.
        let trace = conv.as_ref().and_then(|_| shared.new_trace());
        rec.trace = trace.map(TraceContext::new_span);
        let end = caps.end();
        let sent = one(
            shared.clone(),
            ctx.clone(),
            prepared,
            rec,
            permits,
            end,
            None,
        );
        let Some(conv) = conv else {
            tracker.spawn(async move {
                sent.await;
            });
            continue;
        };
        let turns = Turns {
            conv,
            caps: caps.clone(),
            rng: SmallRng::seed_from_u64(rng.next_u64()),
            ramp: None,
            trace,
        };
        let (shared, ctx, cancel) = (shared.clone(), ctx.clone(), cancel.clone());
        tracker.spawn(async move {
            if let Some(first) = sent.await {
                turns.follow(&shared, &ctx, first, &cancel, None).await;
            }
        });
    }
    scheduled
}

/// The request of an arrival (the phase's arrival number `arrival`, when open loop): the
/// first turn of a new conversation (`None` when it has no turn to send), or a single request.
fn first_request(
    ctx: &PhaseCtx,
    rng: &mut SmallRng,
    seq: u64,
    arrival: Option<usize>,
) -> Option<(Option<Conversation>, Prepared)> {
    // A conversation starts here; its later turns follow its answers.
    let mut conv = ctx.start_conversation(rng, seq);
    let prepared = match conv.as_mut() {
        Some(c) => ctx.prepare_turn(rng, seq, c)?,
        None => ctx.prepare(rng, seq, arrival),
    };
    Some((conv, prepared))
}

/// How a request ended, for the next turn of its conversation.
struct Answered {
    /// No error: the conversation may go on.
    ok: bool,
    /// And its answer passed the phase's check (if any).
    passed: bool,
    /// The answer's text, when it was kept.
    text: Option<String>,
    /// Mean token entropy of the answer (when logprobs were asked).
    entropy: Option<f64>,
    /// Prompt and output tokens (an agentic session's context counts them).
    input_tokens: Option<u32>,
    output_tokens: Option<u32>,
}

/// The turns of a conversation after its first: each after the previous answer and the
/// think time, until the conversation ends, a turn fails, or the phase ends.
struct Turns {
    conv: Conversation,
    /// The phase's caps, which every turn takes as the first did.
    caps: Arc<PhaseCaps>,
    rng: SmallRng,
    /// A closed-loop user's start: its turns during the ramp are marked as its first was.
    ramp: Option<Start>,
    /// The conversation's trace id (`None`: no trace headers).
    trace: Option<TraceId>,
}

impl Turns {
    /// Sends the turns after `first`; each counts as scheduled. Returns the turns sent.
    async fn follow(
        mut self,
        shared: &Arc<Shared>,
        ctx: &Arc<PhaseCtx>,
        first: Answered,
        cancel: &CancellationToken,
        mut own: Option<&mut OwnConn>,
    ) -> u64 {
        let think = ctx.think_time().unwrap_or_default();
        let mut answered = first;
        let mut sent = 0;
        let mut passed = true;
        let mut entropies = Vec::new();
        let task = loop {
            passed &= answered.ok && answered.passed;
            entropies.extend(answered.entropy);
            if !answered.ok {
                break Some(false);
            }
            self.conv.answered(answered.text);
            if self.conv.remaining() == 0 {
                break Some(passed);
            }
            // Cut by the phase's end or a stop: not a task, neither succeeded nor failed.
            let wake = Instant::now() + think;
            if wake >= self.caps.end() {
                break None;
            }
            tokio::select! { () = tokio::time::sleep_until(wake) => {}, () = cancel.cancelled() => break None }
            let seq = shared.seq.fetch_add(1, Ordering::Relaxed);
            let Some(p) = ctx.prepare_turn(&mut self.rng, seq, &mut self.conv) else {
                break None;
            };
            let permits = match self.caps.take(p.max_tokens, cancel).await {
                Taken::Send(permits) => permits,
                // A turn the caps drop ends its conversation, cut (not a task).
                Taken::Dropped => {
                    sent += 1;
                    let _ = shared.tx.send(Msg::Dropped(ctx.index, 1)).await;
                    break None;
                }
                Taken::Ended | Taken::Cancelled => break None,
            };
            // A follow-up turn is closed loop: it is due when it is sent.
            let mut rec = RequestRecord::new(seq, ctx.index, ctx.endpoint, us_since(shared.t0));
            rec.ramp_up = self.ramp.is_some_and(|s| s.in_ramp());
            rec.trace = self.trace.map(TraceContext::new_span);
            sent += 1;
            let end = self.caps.end();
            let Some(next) = one(
                shared.clone(),
                ctx.clone(),
                p,
                rec,
                permits,
                end,
                own.as_deref_mut(),
            )
            .await
            else {
                break None;
            };
            answered = next;
        };
        if let Some(ok) = task {
            let ice = crate::loadgen::engine::conversation::ice(&entropies);
            let _ = shared.tx.send(Msg::Task(ctx.index, ok, ice)).await;
        }
        if own.is_none() {
            let _ = shared.tx.send(Msg::Scheduled(ctx.index, sent)).await;
        }
        sent
    }
}

/// When a closed-loop user starts, and until when its requests count as the ramp's.
#[derive(Debug, Clone, Copy)]
struct Start {
    /// Its first request (and connection) is not before this.
    at: Instant,
    /// Requests started before this are marked `ramp_up` (kept apart from the percentiles).
    ramp_end: Option<Instant>,
}

impl Start {
    /// Whether a request starting now is one of the ramp's.
    fn in_ramp(&self) -> bool {
        self.ramp_end.is_some_and(|e| Instant::now() < e)
    }
}

/// Closed loop: one virtual user sending its next request when the previous one ends.
async fn user(
    shared: Arc<Shared>,
    ctx: Arc<PhaseCtx>,
    caps: Arc<PhaseCaps>,
    mut rng: SmallRng,
    start: Start,
    cancel: CancellationToken,
) {
    if ctx.session.is_some() {
        return session::user(shared, ctx, caps, rng, start, cancel).await;
    }
    if start.at > Instant::now() {
        tokio::select! { () = tokio::time::sleep_until(start.at) => {}, () = cancel.cancelled() => return }
    }
    // Each user owns one connection, as a wrk/oha connection does.
    let mut own = OwnConn::new(&shared.target, shared.timeout, shared.allow_remote);
    let mut n = 0;
    while Instant::now() < caps.end() && !cancel.is_cancelled() {
        let seq = shared.seq.fetch_add(1, Ordering::Relaxed);
        // A user runs one conversation at a time, turn after turn.
        let Some((conv, prepared)) = first_request(&ctx, &mut rng, seq, None) else {
            break;
        };
        // A closed loop waits for its caps (validation refuses `when_capped: drop` for one);
        // waiting for room never runs past the phase's end.
        let Taken::Send(permits) = caps.take(prepared.max_tokens, &cancel).await else {
            break;
        };
        let mut rec = RequestRecord::new(seq, ctx.index, ctx.endpoint, us_since(shared.t0));
        rec.ramp_up = start.in_ramp();
        let trace = conv.as_ref().and_then(|_| shared.new_trace());
        rec.trace = trace.map(TraceContext::new_span);
        let first = one(
            shared.clone(),
            ctx.clone(),
            prepared,
            rec,
            permits,
            caps.end(),
            Some(&mut own),
        )
        .await;
        n += 1;
        let Some(first) = first else {
            break;
        };
        if let Some(conv) = conv {
            let turns = Turns {
                conv,
                caps: caps.clone(),
                rng: SmallRng::seed_from_u64(rng.next_u64()),
                ramp: Some(start),
                trace,
            };
            n += turns
                .follow(&shared, &ctx, first, &cancel, Some(&mut own))
                .await;
        }
    }
    let _ = shared.tx.send(Msg::Scheduled(ctx.index, n)).await;
}

/// One request, and its retries under the phase's retry policy: each attempt reported as it
/// ends. A request outside a conversation with a policy is a task decided by its last attempt.
///
/// A request whose task starts only after the phase's `end` and [`END_SLACK`] (its dispatcher,
/// or the runtime, fell behind) is not sent: it counts as dropped, and `None` is returned.
async fn one(
    shared: Arc<Shared>,
    ctx: Arc<PhaseCtx>,
    p: Prepared,
    mut rec: RequestRecord,
    _permits: Permits,
    end: Instant,
    mut own: Option<&mut OwnConn>,
) -> Option<Answered> {
    if Instant::now() >= end + END_SLACK {
        let _ = shared.tx.send(Msg::Dropped(ctx.index, 1)).await;
        return None;
    }
    let Some(policy) = ctx.retry() else {
        let (rec, answered, truth) = attempt(&shared, &ctx, p, rec, own).await;
        deliver(&shared, rec, truth).await;
        return Some(answered);
    };
    let mut n = 1;
    rec.attempt = Some(n);
    loop {
        let (done, answered, truth) =
            attempt(&shared, &ctx, p.clone(), rec, own.as_deref_mut()).await;
        let again = policy.retries(&done, n);
        let single = done.turn.is_none();
        // A retry stays in its request's trace, as a span of its own.
        let trace = done.trace.map(|t| t.trace_id());
        deliver(&shared, done, truth).await;
        let wait = policy.wait_after(n);
        if !again || shared.hard_stop.is_cancelled() {
            if single {
                let ok = answered.ok && answered.passed;
                let _ = shared.tx.send(Msg::Task(ctx.index, ok, None)).await;
            }
            return Some(answered);
        }
        tokio::select! { () = tokio::time::sleep(wait) => {}, () = shared.hard_stop.cancelled() => {} }
        n += 1;
        let seq = shared.seq.fetch_add(1, Ordering::Relaxed);
        // A retry is due when it is sent: its own latency, apart from first attempts'.
        rec = RequestRecord::new(seq, ctx.index, ctx.endpoint, us_since(shared.t0));
        rec.attempt = Some(n);
        rec.trace = trace.map(TraceContext::new_span);
    }
}

/// Hands a finished record to the collector. A sampled vector query whose recall is still to
/// compute goes to the ground-truth thread, and its record follows from a task of its own
/// once the recall is known: the request's task (and a closed-loop user) moves on at once.
async fn deliver(shared: &Arc<Shared>, mut rec: RequestRecord, truth: Option<Pending>) {
    let Some(job) = truth else {
        let _ = shared.tx.send(Msg::Record(Box::new(rec))).await;
        return;
    };
    let Some(rx) = shared.truth.as_ref().and_then(|t| t.submit(job)) else {
        let _ = shared.tx.send(Msg::RecallDropped(rec.phase)).await;
        let _ = shared.tx.send(Msg::Record(Box::new(rec))).await;
        return;
    };
    let tx = shared.tx.clone();
    tokio::spawn(async move {
        rec.recall = rx.await.ok();
        let _ = tx.send(Msg::Record(Box::new(rec))).await;
    });
}

/// One attempt: executed under the timeout, aborted by the hard stop.
async fn attempt(
    shared: &Arc<Shared>,
    ctx: &PhaseCtx,
    p: Prepared,
    mut rec: RequestRecord,
    own: Option<&mut OwnConn>,
) -> (RequestRecord, Answered, Option<Pending>) {
    let t0 = shared.t0;
    rec.actual_us = us_since(t0);
    // Outside a conversation (which set its own), a request is a span of the run's trace.
    if rec.trace.is_none() {
        rec.trace = shared.trace.map(TraceContext::new_span);
    }
    if ctx.pipeline.is_none() && matches!(ctx.endpoint, Endpoint::Chat | Endpoint::Completions) {
        rec.prompt_key = Some(prompt_key(&p.body));
    }
    let mut base = rec.clone();
    base.chaos = p.chaos;
    let fut = async {
        // A pipeline's steps go to several services: always through the pool.
        let mut via = match own {
            Some(conn) if ctx.pipeline.is_none() => Via::Own(conn),
            _ => Via::Pool(&shared.client),
        };
        let done = ctx.execute(&mut via, &shared.target, p, &mut rec, t0).await;
        (rec, done)
    };
    let (rec, done) = tokio::select! {
        r = tokio::time::timeout(shared.timeout, fut) => r.unwrap_or_else(|_| {
            base.end_us = us_since(t0);
            base.fail(ErrorClass::Timeout, format!("no complete answer within {}", humantime::format_duration(shared.timeout)));
            (base, Executed::default())
        }),
        () = shared.hard_stop.cancelled() => {
            base.end_us = us_since(t0);
            base.fail(ErrorClass::Aborted, "stopped before the answer completed (run interrupted)");
            (base, Executed::default())
        }
    };
    let answered = Answered {
        ok: rec.error.is_none(),
        passed: rec.check != Some(false),
        text: done.text,
        entropy: rec.entropy,
        input_tokens: rec.input_tokens,
        output_tokens: rec.output_tokens,
    };
    (rec, answered, done.truth)
}

/// An LLM request's body hashed (`RequestRecord::prompt_key`).
fn prompt_key(body: &[u8]) -> u64 {
    use std::hash::{Hash as _, Hasher as _};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    body.hash(&mut h);
    h.finish()
}

async fn event(
    shared: Arc<Shared>,
    phase: u32,
    ev: crate::loadgen::scenario::EventSpec,
    uri: hyper::Uri,
    at: Instant,
    cancel: CancellationToken,
) {
    tokio::select! { () = tokio::time::sleep_until(at) => {}, () = cancel.cancelled() => return }
    let method =
        Method::from_bytes(ev.method.to_ascii_uppercase().as_bytes()).unwrap_or(Method::POST);
    let body = ev.body.unwrap_or_else(|| serde_json::json!({})).to_string();
    let req = shared.target.request_to(&method, uri, body.into(), &[]);
    let at_us = us_since(shared.t0);
    let outcome = match tokio::time::timeout(shared.timeout, shared.client.request(req)).await {
        Ok(Ok(resp)) => format!("HTTP {}", resp.status().as_u16()),
        Ok(Err(e)) => crate::loadgen::client::error_chain(&e),
        Err(_) => "timeout".into(),
    };
    let request = format!("{method} {}", ev.path);
    let _ = shared
        .tx
        .send(Msg::Event(EventRecord {
            phase,
            request,
            at_us,
            end_us: us_since(shared.t0),
            outcome,
        }))
        .await;
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panic_while_sending_is_a_failed_run_with_a_report() {
        let mut cfg = crate::sim::profile("healthy").unwrap();
        cfg.vector.corpus_size = 10;
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let sim = crate::sim::start(cfg, l).await.unwrap();
        let yaml = format!(
            "target: http://{}\nphases:\n  - name: p\n    duration: 2s\n    load: {{shape: constant, rate: 20}}\n    request: {{endpoint: http, path: /metrics}}\n",
            sim.addr()
        );
        let s = Plan::from_yaml(&yaml, "t.yaml", Path::new(".")).unwrap();
        let t = std::time::Instant::now();
        let opts = Options {
            fault: Some(Fault::DispatcherPanic { request: 5 }),
            ..Options::new()
        };
        let r = run(&s, opts, CancellationToken::new()).await.unwrap();
        let why = r.stopped.unwrap().to_string();
        assert!(why.starts_with("failed: internal error"), "{why}");
        assert!(why.contains("injected panic"), "{why}");
        // What was sent before the panic is in the report, and the run did not hang.
        assert_eq!(r.records.len(), 5, "{:?}", r.phases[0].counts);
        assert!(t.elapsed() < Duration::from_secs(2));
        sim.shutdown().await.unwrap();
    }
}

//! The engine: one tokio task per request (no thread per user), one dispatcher per phase
//! sleeping until absolute deadlines computed up front, caps on in-flight requests and
//! requested tokens/s, per-request timeouts, and a grace period on cancellation.
//!
//! Latency is measured from the *intended* start: a request held back by a cap or a
//! late timer still has its clock running (coordinated omission handled), and the gap
//! shows separately as send lag.

mod arrivals;
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
mod resolve;
mod send;
pub mod session;
mod stampede;
pub mod tally;
pub mod vector;

use std::{
    sync::{Arc, atomic::AtomicU64},
    time::Duration,
};

use std::panic::AssertUnwindSafe;

use self::{
    arrivals::{Start, first_request, open_loop, user},
    resolve::{Setup, chroma_ef_search},
    send::{event, one},
};

use crate::clock::RunClock;
use crate::dial::{OutOfReach, Reach};

use futures_util::FutureExt as _;
use rand::{RngCore as _, SeedableRng as _, rngs::SmallRng};
use tokio::{
    sync::{Semaphore, mpsc},
    time::Instant,
};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::loadgen::{
    client::{HttpClient, Target, TargetError, us_since},
    engine::caps::{PhaseCaps, Taken},
    engine::request::PhaseCtx,
    engine::tally::Msg,
    engine::vector::truth::Truth,
    scenario::plan::Plan,
    scenario::{Load, Phase, Scenario},
};
use crate::measure::steady;
use crate::measure::vector_health as health;

use crate::measure::{
    provenance::Provenance,
    record::RequestRecord,
    report::{
        PhaseInfo, PhaseReport, RampView, SCHEMA, Stop, StopKind, StressReport, VERSION, VectorInfo,
    },
    shard::Shard,
    trace_context::TraceId,
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
    /// Where the run may connect: loopback only unless `--allow-remote`.
    pub reach: Reach,
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
            reach: Reach::Loopback,
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

impl From<OutOfReach> for RunError {
    fn from(e: OutOfReach) -> Self {
        RunError::Remote(e.url)
    }
}

struct Shared {
    client: HttpClient,
    target: Target,
    t0: std::time::Instant,
    timeout: Duration,
    reach: Reach,
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
        reach: opts.reach,
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
        target: scenario.target.to_string(),
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

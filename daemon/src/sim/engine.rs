//! The engine thread: owns the [`Scheduler`] and the simulated device context, runs steps,
//! spends each step's cost (busy CPU work, then a kernel launch and a blocking stream sync) and
//! delivers tokens to the HTTP handlers over channels.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
        mpsc,
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use tokio::sync::mpsc::UnboundedSender;

use super::{
    allocator::CachingAllocator,
    config::SimConfig,
    device::{self, Context},
    metrics::Metrics,
    sampler::Sampled,
    scheduler::{FinishReason, NewSeq, Output, Scheduler, SeqId},
};

/// What a request's handler receives.
#[derive(Debug, Clone)]
pub enum Event {
    /// The next token.
    Token(Sampled),
    /// Done.
    Finished {
        /// Why.
        reason: FinishReason,
        /// Prompt tokens.
        prompt_tokens: usize,
        /// Generated tokens.
        completion_tokens: usize,
    },
    /// Failed inside the engine (simulated device OOM).
    Failed(String),
}

/// Engine start-up failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The KV pool does not fit on the simulated device.
    #[error("cannot allocate the KV pool ({bytes} bytes) on the simulated device: CUresult {code}")]
    KvPool {
        /// Pool size.
        bytes: u64,
        /// `CUresult`.
        code: i32,
    },
    /// The thread could not be spawned.
    #[error("cannot spawn the engine thread: {0}")]
    Spawn(#[from] std::io::Error),
}

enum Command {
    Add(NewSeq, UnboundedSender<Event>),
    Abort(SeqId),
    ResetPrefixCache,
}

/// State shared between the engine thread and the HTTP side.
#[derive(Debug)]
pub struct Shared {
    /// Requests accepted but never scheduled (the admission queue, for the 503 cap).
    pub queued: AtomicUsize,
    /// KV blocks in use now.
    pub kv_used_blocks: AtomicUsize,
    /// Metrics, updated once per step.
    pub metrics: Mutex<Metrics>,
    /// The simulated device.
    pub device: Context,
}

impl Shared {
    /// Fresh state for `cfg`, with its simulated device.
    #[must_use]
    pub fn new(cfg: &SimConfig) -> Self {
        Self {
            queued: AtomicUsize::new(0),
            kv_used_blocks: AtomicUsize::new(0),
            metrics: Mutex::new({
                let mut m = Metrics::new(&cfg.model, cfg.engine.num_gpu_blocks);
                m.prefix_caching = cfg.engine.enable_prefix_caching;
                if cfg.fixed.is_some() {
                    m.lateness = Some(super::lateness::Lateness::default());
                }
                m
            }),
            device: Context::new(cfg.device_memory_bytes()),
        }
    }

    /// Locks the metrics (a poisoned lock still holds valid counters).
    pub fn metrics(&self) -> std::sync::MutexGuard<'_, Metrics> {
        self.metrics
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Handle to a running engine thread; dropping it stops the thread.
#[derive(Debug)]
pub struct Engine {
    tx: Option<mpsc::Sender<Command>>,
    /// Shared state.
    pub shared: Arc<Shared>,
    join: Option<JoinHandle<()>>,
}

impl Engine {
    /// Starts the engine thread; fails when the KV pool does not fit on the device.
    pub fn start(cfg: &SimConfig, shared: Arc<Shared>) -> Result<Self, EngineError> {
        let device = shared.device.clone();
        let (tx, rx) = mpsc::channel();
        let (ready_tx, ready_rx) = mpsc::channel();
        let cfg = cfg.clone();
        let sh = shared.clone();
        let join = std::thread::Builder::new()
            .name("sim-engine".to_owned())
            .spawn(move || {
                device.make_current();
                let pool_bytes = cfg.kv_pool_bytes();
                let pool = match device::alloc(pool_bytes) {
                    Ok(p) => p,
                    Err(code) => {
                        let _ = ready_tx.send(Err(EngineError::KvPool {
                            bytes: pool_bytes,
                            code,
                        }));
                        return;
                    }
                };
                let (mut free, mut total) = (0usize, 0usize);
                // SAFETY: both pointers are valid for a usize write.
                unsafe { device::cuMemGetInfo_v2(&raw mut free, &raw mut total) };
                tracing::debug!(
                    free,
                    total,
                    pool_bytes,
                    "KV pool allocated on the simulated device"
                );
                let _ = ready_tx.send(Ok(()));
                run(&cfg, &rx, &sh);
                let _ = device::free(pool);
            })?;
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                let _ = join.join();
                return Err(e);
            }
            Err(_) => {
                let _ = join.join();
                return Err(EngineError::Spawn(std::io::Error::other(
                    "the engine thread died",
                )));
            }
        }
        Ok(Self {
            tx: Some(tx),
            shared,
            join: Some(join),
        })
    }

    /// Queues a request; its events arrive on `events`. Dropping the receiver aborts it.
    pub fn submit(&self, seq: NewSeq, events: UnboundedSender<Event>) {
        self.shared.queued.fetch_add(1, Ordering::SeqCst);
        if let Some(tx) = &self.tx {
            let _ = tx.send(Command::Add(seq, events));
        }
    }

    /// Forgets the prefix cache before the next step.
    pub fn reset_prefix_cache(&self) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(Command::ResetPrefixCache);
        }
    }

    /// Aborts a request (client gone).
    pub fn abort(&self, id: SeqId) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(Command::Abort(id));
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // Closing the channel ends the loop.
        self.tx.take();
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

/// Burns `d` of CPU time on this thread (the host-side share of a step).
#[inline(never)]
pub fn busy_work(d: Duration) {
    let end = Instant::now() + d;
    let mut x: u64 = 0x9e37_79b9;
    while Instant::now() < end {
        for _ in 0..64 {
            x = std::hint::black_box(x.rotate_left(5) ^ x.wrapping_mul(31));
        }
    }
    std::hint::black_box(x);
}

fn run(cfg: &SimConfig, rx: &mpsc::Receiver<Command>, sh: &Shared) {
    let mut sched = Scheduler::new(cfg.engine.clone(), cfg.device.workspace_bytes_per_token);
    let mut ws = CachingAllocator::default();
    let mut sinks: std::collections::HashMap<SeqId, UnboundedSender<Event>> =
        std::collections::HashMap::new();
    let handle = |cmd: Command,
                  sched: &mut Scheduler,
                  sinks: &mut std::collections::HashMap<_, _>| match cmd {
        Command::Add(seq, tx) => {
            sinks.insert(seq.id, tx);
            sched.add(seq);
        }
        Command::Abort(id) => {
            sinks.remove(&id);
            if sched.abort(id) == Some(true) {
                sh.queued.fetch_sub(1, Ordering::SeqCst);
            }
        }
        Command::ResetPrefixCache => sched.reset_prefix_cache(),
    };
    loop {
        if sched.is_idle() {
            publish(sh, &sched);
            match rx.recv() {
                Ok(cmd) => handle(cmd, &mut sched, &mut sinks),
                Err(_) => return,
            }
        }
        loop {
            match rx.try_recv() {
                Ok(cmd) => handle(cmd, &mut sched, &mut sinks),
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => return,
            }
        }
        // Clients that went away: free their blocks before planning.
        let gone: Vec<SeqId> = sched
            .ids()
            .filter(|id| sinks.get(id).is_none_or(UnboundedSender::is_closed))
            .collect();
        for id in gone {
            handle(Command::Abort(id), &mut sched, &mut sinks);
            sh.metrics().finished("abort");
        }
        if sched.is_idle() {
            continue;
        }
        let plan = sched.schedule(&mut ws, Instant::now());
        sh.queued.fetch_sub(plan.newly_scheduled, Ordering::SeqCst);
        let mut outputs = plan.failed;
        if plan.num_seqs == 0 {
            // Nothing fits right now (all blocks held by waiting work is impossible: wait for
            // a command rather than spinning).
            publish(sh, &sched);
            dispatch(sh, &mut sinks, outputs, &sched);
            if let Ok(cmd) = rx.recv_timeout(Duration::from_millis(1)) {
                handle(cmd, &mut sched, &mut sinks);
            }
            continue;
        }
        let step = cfg.cost.step_time(plan.prefill_tokens, plan.num_seqs);
        let cpu = step.mul_f64(cfg.cost.cpu_fraction);
        busy_work(cpu);
        let rc = device::run_forward(step.saturating_sub(cpu));
        if rc != device::CUDA_SUCCESS {
            // Cannot happen with our own context and kernel; say so rather than hide it.
            tracing::warn!(rc, "simulated kernel launch failed");
        }
        outputs.extend(sched.complete(Instant::now()));
        dispatch(sh, &mut sinks, outputs, &sched);
    }
}

fn publish(sh: &Shared, sched: &Scheduler) {
    sh.kv_used_blocks
        .store(sched.kv().num_used(), Ordering::SeqCst);
    let mut m = sh.metrics();
    m.gauges.running = sched.num_running();
    m.gauges.waiting = sched.num_waiting();
    m.gauges.kv_usage = sched.kv().usage();
    let c = sched.counters;
    m.preemptions = c.preemptions;
    m.prefix_queries = c.prefix_queries;
    m.prefix_hits = c.prefix_hits;
    m.prompt_tokens = c.prompt_tokens;
    m.generation_tokens = c.generation_tokens;
}

fn dispatch(
    sh: &Shared,
    sinks: &mut std::collections::HashMap<SeqId, UnboundedSender<Event>>,
    outputs: Vec<Output>,
    sched: &Scheduler,
) {
    publish(sh, sched);
    let mut m = sh.metrics();
    for o in outputs {
        match o {
            Output::Token {
                id,
                token,
                itl,
                ttft,
                ..
            } => {
                if let Some(t) = ttft {
                    m.ttft.observe(t.as_secs_f64());
                }
                if let Some(t) = itl {
                    m.itl.observe(t.as_secs_f64());
                }
                if let Some(tx) = sinks.get(&id) {
                    let _ = tx.send(Event::Token(token));
                }
            }
            Output::Finished {
                id,
                reason,
                prompt_tokens,
                completion_tokens,
                queue_time,
                e2e,
            } => {
                m.e2e.observe(e2e.as_secs_f64());
                m.queue.observe(queue_time.as_secs_f64());
                m.finished(match reason {
                    FinishReason::Stop => "stop",
                    FinishReason::Length => "length",
                });
                if let Some(tx) = sinks.remove(&id) {
                    let _ = tx.send(Event::Finished {
                        reason,
                        prompt_tokens,
                        completion_tokens,
                    });
                }
            }
            Output::Failed { id, error } => {
                m.finished("error");
                if let Some(tx) = sinks.remove(&id) {
                    let _ = tx.send(Event::Failed(error));
                }
            }
        }
    }
}

//! The engine's core: a vLLM-like scheduler with continuous batching, chunked prefill, a paged
//! KV cache with preemption by recompute, and prefix caching. Pure and step-driven (no threads,
//! no sleeping): [`Scheduler::schedule`] plans a step, the caller spends its time, then
//! [`Scheduler::complete`] applies it. That keeps it unit-testable.

use std::{
    collections::VecDeque,
    time::{Duration, Instant},
};

use super::{
    allocator::Workspace,
    config::EngineConfig,
    kv_cache::{BLOCK_SIZE, BlockId, BlockManager, blocks_for, chain_key, chain_keys},
    sampler::{Sampled, Sampler},
    tokenizer::piece_id,
};

/// Identifies a request inside the engine.
pub type SeqId = u64;

/// A request handed to the engine.
#[derive(Debug, Clone)]
pub struct NewSeq {
    /// Unique id.
    pub id: SeqId,
    /// Prompt token ids (at least one).
    pub prompt: Vec<u32>,
    /// Tokens to generate; the sequence stops with `length` when it gets there.
    pub max_tokens: usize,
    /// The simulated model's own answer length: stop earlier with `stop` (None = never).
    pub stop_after: Option<usize>,
    /// Draws the tokens.
    pub sampler: Sampler,
    /// When the request arrived (queue time and TTFT are measured from here).
    pub arrival: Instant,
}

/// Why a sequence ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// The model's answer ended.
    Stop,
    /// `max_tokens` reached.
    Length,
}

impl FinishReason {
    /// The `OpenAI` `finish_reason`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }
}

/// What a step produced.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// A new token of `id`; `index` counts from 0.
    Token {
        /// Sequence.
        id: SeqId,
        /// Position in the completion.
        index: usize,
        /// The token.
        token: Sampled,
        /// Since the previous token (None for the first).
        itl: Option<Duration>,
        /// Since arrival, for the first token.
        ttft: Option<Duration>,
    },
    /// `id` finished; its blocks are free.
    Finished {
        /// Sequence.
        id: SeqId,
        /// Why.
        reason: FinishReason,
        /// Prompt tokens.
        prompt_tokens: usize,
        /// Generated tokens.
        completion_tokens: usize,
        /// Arrival to first scheduling.
        queue_time: Duration,
        /// Arrival to last token.
        e2e: Duration,
    },
    /// `id` failed (simulated device OOM); its blocks are free.
    Failed {
        /// Sequence.
        id: SeqId,
        /// Human-readable reason.
        error: String,
    },
}

/// Cumulative counters (exported as vLLM metrics).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    /// Preemptions (recompute).
    pub preemptions: u64,
    /// Prompt tokens looked up in the prefix cache.
    pub prefix_queries: u64,
    /// Of those, tokens found.
    pub prefix_hits: u64,
    /// Prompt tokens of requests scheduled for the first time.
    pub prompt_tokens: u64,
    /// Tokens generated.
    pub generation_tokens: u64,
}

/// What [`Scheduler::schedule`] decided.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct StepPlan {
    /// Prefill tokens in the step.
    pub prefill_tokens: usize,
    /// Decode tokens in the step.
    pub decode_tokens: usize,
    /// Sequences in the step.
    pub num_seqs: usize,
    /// Sequences scheduled for the first time (they left the admission queue).
    pub newly_scheduled: usize,
    /// Requests failed while planning (device OOM).
    pub failed: Vec<Output>,
}

#[derive(Debug)]
struct Seq {
    new: NewSeq,
    tokens: Vec<u32>,
    generated: usize,
    blocks: Vec<BlockId>,
    keys: Vec<u64>,
    computed: usize,
    scheduled: usize,
    first_scheduled: Option<Instant>,
    last_token: Option<Instant>,
}

impl Seq {
    fn limit(&self) -> usize {
        self.new
            .stop_after
            .map_or(self.new.max_tokens, |s| s.min(self.new.max_tokens))
    }
}

/// The scheduler of one engine.
#[derive(Debug)]
pub struct Scheduler {
    cfg: EngineConfig,
    ws_bytes_per_token: u64,
    kv: BlockManager,
    waiting: VecDeque<Seq>,
    running: Vec<Seq>,
    /// Cumulative counters.
    pub counters: Counters,
}

impl Scheduler {
    /// A scheduler; `ws_bytes_per_token` sizes each step's workspace.
    #[must_use]
    pub fn new(cfg: EngineConfig, ws_bytes_per_token: u64) -> Self {
        Self {
            kv: BlockManager::new(cfg.num_gpu_blocks),
            cfg,
            ws_bytes_per_token,
            waiting: VecDeque::new(),
            running: Vec::new(),
            counters: Counters::default(),
        }
    }

    /// Longest prompt + completion a request may have: the context length, or the whole KV
    /// cache when that is smaller (a longer one could never run, even alone).
    #[must_use]
    pub fn max_len(cfg: &EngineConfig) -> usize {
        cfg.max_model_len.min(cfg.num_gpu_blocks * BLOCK_SIZE)
    }

    /// Queues a request. The caller has checked it against [`Self::max_len`].
    pub fn add(&mut self, new: NewSeq) {
        debug_assert!(!new.prompt.is_empty());
        debug_assert!(new.prompt.len() + new.max_tokens <= Self::max_len(&self.cfg));
        self.waiting.push_back(Seq {
            tokens: new.prompt.clone(),
            new,
            generated: 0,
            blocks: Vec::new(),
            keys: Vec::new(),
            computed: 0,
            scheduled: 0,
            first_scheduled: None,
            last_token: None,
        });
    }

    /// Removes a request (client gone) and frees its blocks. Returns `Some(true)` when it had
    /// never been scheduled, `None` when unknown.
    pub fn abort(&mut self, id: SeqId) -> Option<bool> {
        let seq = if let Some(i) = self.running.iter().position(|s| s.new.id == id) {
            self.running.remove(i)
        } else {
            let i = self.waiting.iter().position(|s| s.new.id == id)?;
            self.waiting.remove(i)?
        };
        self.kv.free(&seq.blocks);
        Some(seq.first_scheduled.is_none())
    }

    /// Sequences running.
    #[must_use]
    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    /// Sequences waiting (new or preempted).
    #[must_use]
    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Whether nothing is queued or running.
    #[must_use]
    pub fn is_idle(&self) -> bool {
        self.running.is_empty() && self.waiting.is_empty()
    }

    /// The KV block pool.
    #[must_use]
    pub fn kv(&self) -> &BlockManager {
        &self.kv
    }

    /// Forgets the prefix cache (see [`BlockManager::reset_prefix_cache`]).
    pub fn reset_prefix_cache(&mut self) {
        self.kv.reset_prefix_cache();
    }

    /// Ids of all sequences, running first.
    pub fn ids(&self) -> impl Iterator<Item = SeqId> + '_ {
        self.running.iter().chain(&self.waiting).map(|s| s.new.id)
    }

    fn preempt(&mut self, i: usize) {
        let mut s = self.running.remove(i);
        self.kv.free(&s.blocks);
        s.blocks.clear();
        s.keys.clear();
        s.computed = 0;
        s.scheduled = 0;
        self.counters.preemptions += 1;
        self.waiting.push_front(s);
    }

    /// Plans one step: tokens per running sequence (preempting the newest when the cache is
    /// full), admits waiting sequences, and reserves the step's workspace on the device.
    pub fn schedule(&mut self, ws: &mut dyn Workspace, now: Instant) -> StepPlan {
        let mut plan = StepPlan::default();
        let mut budget = self.cfg.max_num_batched_tokens;
        let mut preempted = false;
        let mut i = 0;
        'running: while i < self.running.len() {
            let s = &self.running[i];
            let n = (s.tokens.len() - s.computed).min(budget);
            if n == 0 {
                i += 1;
                continue;
            }
            let need = blocks_for(s.computed + n).saturating_sub(s.blocks.len());
            for _ in 0..need {
                loop {
                    if let Some(b) = self.kv.allocate() {
                        self.running[i].blocks.push(b);
                        break;
                    }
                    // No free block: recompute the newest running sequence later.
                    let newest = self.running.len() - 1;
                    self.preempt(newest);
                    preempted = true;
                    if newest == i {
                        break 'running;
                    }
                }
            }
            self.running[i].scheduled = n;
            budget -= n;
            i += 1;
        }
        // Like vLLM, admit nothing new in a step that had to preempt.
        while !preempted && budget > 0 && self.running.len() < self.cfg.max_num_seqs {
            let Some(s) = self.waiting.front() else { break };
            let keys = chain_keys(&s.tokens);
            // At least one token must be computed to produce logits.
            let usable = keys.len().min((s.tokens.len() - 1) / BLOCK_SIZE);
            let hits = if self.cfg.enable_prefix_caching {
                self.kv.cached_prefix(&keys[..usable])
            } else {
                0
            };
            let computed = hits * BLOCK_SIZE;
            let n = (s.tokens.len() - computed).min(budget);
            let mut blocks = self.kv.take_cached(&keys[..hits]);
            let need = blocks_for(computed + n) - hits;
            for _ in 0..need {
                match self.kv.allocate() {
                    Some(b) => blocks.push(b),
                    None => break,
                }
            }
            if blocks.len() < hits + need {
                self.kv.free(&blocks);
                break;
            }
            let mut s = self.waiting.pop_front().expect("front exists");
            if self.cfg.enable_prefix_caching {
                self.counters.prefix_queries += s.tokens.len() as u64;
                self.counters.prefix_hits += computed as u64;
            }
            if s.first_scheduled.is_none() {
                s.first_scheduled = Some(now);
                plan.newly_scheduled += 1;
                self.counters.prompt_tokens += s.new.prompt.len() as u64;
            }
            s.keys = keys[..hits].to_vec();
            s.blocks = blocks;
            s.computed = computed;
            s.scheduled = n;
            budget -= n;
            self.running.push(s);
        }
        self.reserve_workspace(ws, &mut plan);
        for s in &self.running {
            if s.scheduled > 0 {
                plan.num_seqs += 1;
                if s.tokens.len() - s.computed > 1 || s.computed < s.new.prompt.len() {
                    plan.prefill_tokens += s.scheduled;
                } else {
                    plan.decode_tokens += s.scheduled;
                }
            }
        }
        plan
    }

    // On OOM (after the allocator's own flush-and-retry) fail the largest prefill of the step,
    // then the next, until the rest fits; decodes fail only if even they do not fit.
    fn reserve_workspace(&mut self, ws: &mut dyn Workspace, plan: &mut StepPlan) {
        loop {
            let tokens: usize = self.running.iter().map(|s| s.scheduled).sum();
            let Err(oom) = ws.reserve(tokens as u64 * self.ws_bytes_per_token) else {
                return;
            };
            let victim = self
                .running
                .iter()
                .enumerate()
                .filter(|(_, s)| s.scheduled > 1)
                .max_by_key(|(i, s)| (s.scheduled, *i))
                .map(|(i, _)| i);
            let victims: Vec<usize> = match victim {
                Some(i) => vec![i],
                None => (0..self.running.len())
                    .filter(|i| self.running[*i].scheduled > 0)
                    .rev()
                    .collect(),
            };
            if victims.is_empty() {
                return;
            }
            for i in victims {
                let s = self.running.remove(i);
                self.kv.free(&s.blocks);
                plan.failed.push(Output::Failed {
                    id: s.new.id,
                    error: oom.to_string(),
                });
            }
        }
    }

    /// Applies a planned step at time `now`: marks scheduled tokens computed, seals full blocks
    /// into the prefix cache, samples one token per sequence that caught up, and finishes
    /// sequences that reached their length.
    pub fn complete(&mut self, now: Instant) -> Vec<Output> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.running.len() {
            let s = &mut self.running[i];
            if s.scheduled == 0 {
                i += 1;
                continue;
            }
            let old = s.computed;
            s.computed += s.scheduled;
            s.scheduled = 0;
            for b in old / BLOCK_SIZE..s.computed / BLOCK_SIZE {
                let parent = if b == 0 { 0 } else { s.keys[b - 1] };
                let key = chain_key(parent, &s.tokens[b * BLOCK_SIZE..(b + 1) * BLOCK_SIZE]);
                s.keys.truncate(b);
                s.keys.push(key);
                if self.cfg.enable_prefix_caching {
                    self.kv.seal(s.blocks[b], key);
                }
            }
            if s.computed < s.tokens.len() {
                i += 1;
                continue;
            }
            let index = s.generated;
            let token = s.new.sampler.token(index);
            s.tokens.push(piece_id(&token.text));
            s.generated += 1;
            let (itl, ttft) = match s.last_token {
                Some(t) => (Some(now - t), None),
                None => (None, Some(now - s.new.arrival)),
            };
            s.last_token = Some(now);
            self.counters.generation_tokens += 1;
            out.push(Output::Token {
                id: s.new.id,
                index,
                token,
                itl,
                ttft,
            });
            if s.generated >= s.limit() {
                let s = self.running.remove(i);
                self.kv.free(&s.blocks);
                out.push(Output::Finished {
                    id: s.new.id,
                    reason: if s.generated >= s.new.max_tokens {
                        FinishReason::Length
                    } else {
                        FinishReason::Stop
                    },
                    prompt_tokens: s.new.prompt.len(),
                    completion_tokens: s.generated,
                    queue_time: s.first_scheduled.unwrap_or(now) - s.new.arrival,
                    e2e: now - s.new.arrival,
                });
            } else {
                i += 1;
            }
        }
        out
    }
}

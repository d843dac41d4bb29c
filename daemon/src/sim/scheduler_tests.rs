//! Unit tests of the engine core: block accounting, preemption, prefix caching, device OOM.

use std::{collections::HashMap, time::Instant};

use super::{
    allocator::{CachingAllocator, OutOfMemory, Workspace},
    config::EngineConfig,
    device::Context,
    kv_cache::BLOCK_SIZE,
    sampler::Sampler,
    scheduler::{FinishReason, NewSeq, Output, Scheduler, SeqId},
};

struct Unlimited;
impl Workspace for Unlimited {
    fn reserve(&mut self, _: u64) -> Result<(), OutOfMemory> {
        Ok(())
    }
}

fn cfg(blocks: usize) -> EngineConfig {
    EngineConfig {
        max_num_seqs: 64,
        max_num_batched_tokens: 512,
        num_gpu_blocks: blocks,
        max_model_len: 4096,
        max_waiting: 1000,
        enable_prefix_caching: true,
    }
}

fn seq(id: SeqId, prompt: Vec<u32>, max_tokens: usize) -> NewSeq {
    NewSeq {
        id,
        prompt,
        max_tokens,
        stop_after: None,
        sampler: Sampler::new(id, 0.8),
        arrival: Instant::now(),
    }
}

fn prompt(id: u32, len: usize) -> Vec<u32> {
    (0..len as u32).map(|i| id * 100_000 + i).collect()
}

/// Runs until idle; checks capacity every step; returns all outputs.
fn run(s: &mut Scheduler, ws: &mut dyn Workspace) -> Vec<Output> {
    let mut out = Vec::new();
    for _ in 0..100_000 {
        if s.is_idle() {
            return out;
        }
        let plan = s.schedule(ws, Instant::now());
        assert!(s.kv().num_used() <= s.kv().capacity());
        assert!(plan.prefill_tokens + plan.decode_tokens <= 512);
        out.extend(plan.failed);
        out.extend(s.complete(Instant::now()));
        assert!(s.kv().num_used() <= s.kv().capacity());
    }
    panic!("the scheduler did not drain");
}

fn finished(out: &[Output]) -> HashMap<SeqId, (FinishReason, usize)> {
    out.iter()
        .filter_map(|o| match o {
            Output::Finished {
                id,
                reason,
                completion_tokens,
                ..
            } => Some((*id, (*reason, *completion_tokens))),
            _ => None,
        })
        .collect()
}

#[test]
fn block_accounting_stays_within_capacity_and_returns_to_zero() {
    let mut s = Scheduler::new(cfg(40), 0);
    for i in 0..30u32 {
        let len = 5 + (i as usize * 37) % 90;
        s.add(seq(
            u64::from(i),
            prompt(i, len),
            10 + (i as usize * 13) % 50,
        ));
    }
    let out = run(&mut s, &mut Unlimited);
    assert_eq!(finished(&out).len(), 30);
    assert_eq!(s.kv().num_used(), 0);
    assert_eq!(s.kv().num_free(), 40);
}

#[test]
fn full_cache_preempts_and_preempted_requests_complete_exactly() {
    // 8 blocks = 128 tokens; three requests of 20 + 60 tokens need 15 blocks together.
    let mut s = Scheduler::new(cfg(8), 0);
    for i in 0..3 {
        s.add(seq(i, prompt(i as u32, 20), 60));
    }
    let out = run(&mut s, &mut Unlimited);
    assert!(s.counters.preemptions > 0, "no preemption happened");
    let fin = finished(&out);
    for i in 0..3 {
        assert_eq!(fin[&i], (FinishReason::Length, 60));
        let idx: Vec<usize> = out
            .iter()
            .filter_map(|o| match o {
                Output::Token { id, index, .. } if *id == i => Some(*index),
                _ => None,
            })
            .collect();
        assert_eq!(
            idx,
            (0..60).collect::<Vec<_>>(),
            "each token exactly once, in order"
        );
        // Recompute regenerates nothing: the text equals an unpreempted run's.
        let texts: Vec<String> = out
            .iter()
            .filter_map(|o| match o {
                Output::Token { id, token, .. } if *id == i => Some(token.text.clone()),
                _ => None,
            })
            .collect();
        let sampler = Sampler::new(i, 0.8);
        assert_eq!(
            texts,
            (0..60).map(|p| sampler.token(p).text).collect::<Vec<_>>()
        );
    }
    assert_eq!(s.counters.generation_tokens, 180);
    assert_eq!(s.kv().num_used(), 0);
}

#[test]
fn shared_prefixes_hit_the_prefix_cache() {
    let mut s = Scheduler::new(cfg(64), 0);
    let base = prompt(1, 64);
    s.add(seq(1, base.clone(), 4));
    run(&mut s, &mut Unlimited);
    assert_eq!(s.counters.prefix_hits, 0);
    assert_eq!(s.counters.prefix_queries, 64);
    // Same first 48 tokens (3 full blocks), different tail.
    let mut other = base[..48].to_vec();
    other.extend(prompt(2, 30));
    s.add(seq(2, other, 4));
    run(&mut s, &mut Unlimited);
    assert_eq!(s.counters.prefix_hits, 48);
    // An identical prompt reuses all blocks but the last token's.
    s.add(seq(3, base, 4));
    run(&mut s, &mut Unlimited);
    assert_eq!(s.counters.prefix_hits, 48 + 3 * BLOCK_SIZE as u64);
    assert_eq!(s.counters.prefix_queries, 64 + 78 + 64);
    assert_eq!(s.kv().num_used(), 0);
}

#[test]
fn prefix_caching_can_be_disabled() {
    let mut c = cfg(64);
    c.enable_prefix_caching = false;
    let mut s = Scheduler::new(c, 0);
    for i in 0..2 {
        s.add(seq(i, prompt(7, 64), 4));
        run(&mut s, &mut Unlimited);
    }
    assert_eq!(s.counters.prefix_hits, 0);
}

#[test]
fn device_oom_fails_exactly_the_request_that_does_not_fit() {
    std::thread::spawn(|| {
        // 64 MiB device, 1 MiB workspace per token: at most 64 tokens per step.
        let ctx = Context::new(64 << 20);
        ctx.make_current();
        let mut ws = CachingAllocator::default();
        let mut s = Scheduler::new(cfg(256), 1 << 20);
        s.add(seq(1, prompt(1, 30), 5));
        s.add(seq(2, prompt(2, 200), 5));
        s.add(seq(3, prompt(3, 20), 5));
        let out = run(&mut s, &mut ws);
        let failed: Vec<SeqId> = out
            .iter()
            .filter_map(|o| match o {
                Output::Failed { id, error } => {
                    assert!(error.contains("out of memory"), "{error}");
                    Some(*id)
                }
                _ => None,
            })
            .collect();
        assert_eq!(failed, [2]);
        let fin = finished(&out);
        assert_eq!(fin.len(), 2);
        assert_eq!(fin[&1], (FinishReason::Length, 5));
        assert_eq!(fin[&3], (FinishReason::Length, 5));
        assert!(ws.stats.cache_flushes >= 1 && ws.stats.ooms >= 2);
        assert_eq!(s.kv().num_used(), 0);
        drop(ws);
        assert_eq!(ctx.used(), 0);
    })
    .join()
    .unwrap();
}

#[test]
fn max_num_seqs_caps_the_batch_and_abort_frees_blocks() {
    let mut c = cfg(256);
    c.max_num_seqs = 2;
    let mut s = Scheduler::new(c, 0);
    for i in 0..5 {
        s.add(seq(i, prompt(i as u32, 40), 100));
    }
    let plan = s.schedule(&mut Unlimited, Instant::now());
    assert_eq!(plan.num_seqs, 2);
    assert_eq!(plan.newly_scheduled, 2);
    s.complete(Instant::now());
    assert_eq!((s.num_running(), s.num_waiting()), (2, 3));
    assert!(s.kv().num_used() > 0);
    assert_eq!(s.abort(0), Some(false));
    assert_eq!(s.abort(4), Some(true));
    assert_eq!(s.abort(99), None);
    s.abort(1);
    s.abort(2);
    s.abort(3);
    assert!(s.is_idle());
    assert_eq!(s.kv().num_used(), 0);
}

#[test]
fn chunked_prefill_respects_the_token_budget() {
    let mut s = Scheduler::new(cfg(256), 0);
    s.add(seq(1, prompt(1, 1200), 3));
    let plan = s.schedule(&mut Unlimited, Instant::now());
    assert_eq!(plan.prefill_tokens, 512);
    assert!(
        s.complete(Instant::now()).is_empty(),
        "no token before the prefill is done"
    );
    let out = run(&mut s, &mut Unlimited);
    assert_eq!(finished(&out)[&1], (FinishReason::Length, 3));
}

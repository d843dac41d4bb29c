//! Paged KV cache: fixed-size blocks, reference counts, and prefix caching of full blocks keyed
//! by a hash chain (block i's key hashes block i-1's key and block i's tokens), as in vLLM.
//!
//! A block whose reference count drops to zero goes to the free list but keeps its key, so a
//! later request with the same prefix can take it back; it is evicted (key dropped) only when
//! the block is handed out for new content, least recently freed first.

use std::collections::{BTreeSet, HashMap};

use super::tokenizer::fnv1a;

/// Tokens per block (vLLM's default `block_size`).
pub const BLOCK_SIZE: usize = 16;

/// Index of a block in the pool.
pub type BlockId = u32;

#[derive(Debug, Clone, Copy, Default)]
struct Block {
    refs: u32,
    key: Option<u64>,
    // Order in the free list (lower = freed earlier = evicted first).
    freed_at: u64,
}

/// The block pool of one engine.
#[derive(Debug)]
pub struct BlockManager {
    blocks: Vec<Block>,
    free: BTreeSet<(u64, BlockId)>,
    cached: HashMap<u64, BlockId>,
    tick: u64,
    used: usize,
}

/// Key of a full block following `parent` (0 for the first block).
#[must_use]
pub fn chain_key(parent: u64, tokens: &[u32]) -> u64 {
    let mut buf = Vec::with_capacity(8 + tokens.len() * 4);
    buf.extend_from_slice(&parent.to_le_bytes());
    for t in tokens {
        buf.extend_from_slice(&t.to_le_bytes());
    }
    // Never 0, so 0 can stand for "no parent".
    fnv1a(&buf).max(1)
}

/// Keys of all full blocks of `tokens`.
#[must_use]
pub fn chain_keys(tokens: &[u32]) -> Vec<u64> {
    let mut parent = 0;
    tokens
        .chunks_exact(BLOCK_SIZE)
        .map(|c| {
            parent = chain_key(parent, c);
            parent
        })
        .collect()
}

/// Blocks needed to hold `tokens` tokens.
#[must_use]
pub fn blocks_for(tokens: usize) -> usize {
    tokens.div_ceil(BLOCK_SIZE)
}

impl BlockManager {
    /// A pool of `num_blocks` free blocks.
    #[must_use]
    pub fn new(num_blocks: usize) -> Self {
        let blocks = vec![Block::default(); num_blocks];
        let free = (0..num_blocks as BlockId).map(|b| (0, b)).collect();
        Self {
            blocks,
            free,
            cached: HashMap::new(),
            tick: 0,
            used: 0,
        }
    }

    /// Total blocks.
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.blocks.len()
    }

    /// Blocks referenced by at least one sequence.
    #[must_use]
    pub fn num_used(&self) -> usize {
        self.used
    }

    /// Blocks that can be handed out (free, cached or not).
    #[must_use]
    pub fn num_free(&self) -> usize {
        self.free.len()
    }

    /// Fraction of blocks in use, 0..=1 (vLLM's `kv_cache_usage_perc`).
    #[must_use]
    pub fn usage(&self) -> f64 {
        self.used as f64 / self.blocks.len() as f64
    }

    /// How many leading keys of `keys` are cached.
    #[must_use]
    pub fn cached_prefix(&self, keys: &[u64]) -> usize {
        keys.iter()
            .take_while(|k| self.cached.contains_key(k))
            .count()
    }

    /// Takes a reference on the cached blocks of the first `n` keys (see [`Self::cached_prefix`]).
    pub fn take_cached(&mut self, keys: &[u64]) -> Vec<BlockId> {
        let mut out = Vec::with_capacity(keys.len());
        for k in keys {
            let Some(&b) = self.cached.get(k) else { break };
            self.incref(b);
            out.push(b);
        }
        out
    }

    /// A block for new content, evicting the least recently freed one; `None` when all are used.
    pub fn allocate(&mut self) -> Option<BlockId> {
        let &(t, b) = self.free.iter().next()?;
        self.free.remove(&(t, b));
        let blk = &mut self.blocks[b as usize];
        if let Some(k) = blk.key.take()
            && self.cached.get(&k) == Some(&b)
        {
            self.cached.remove(&k);
        }
        blk.refs = 1;
        self.used += 1;
        Some(b)
    }

    /// Records that `block` is full with the content identified by `key`, so it can be shared.
    pub fn seal(&mut self, block: BlockId, key: u64) {
        self.blocks[block as usize].key = Some(key);
        self.cached.entry(key).or_insert(block);
    }

    /// Drops one reference on each block; blocks that reach zero become free (keeping their key).
    pub fn free(&mut self, blocks: &[BlockId]) {
        // Free the tail first so a prefix's head is evicted last, as vLLM does.
        for &b in blocks.iter().rev() {
            let blk = &mut self.blocks[b as usize];
            assert!(blk.refs > 0, "double free of KV block {b}");
            blk.refs -= 1;
            if blk.refs == 0 {
                self.tick += 1;
                blk.freed_at = self.tick;
                self.free.insert((self.tick, b));
                self.used -= 1;
            }
        }
    }

    /// Forgets every cached prefix (vLLM's `/reset_prefix_cache`, an entry expired): blocks in
    /// use keep their content for the sequences holding them, but no new sequence finds it.
    pub fn reset_prefix_cache(&mut self) {
        self.cached.clear();
        for blk in &mut self.blocks {
            blk.key = None;
        }
    }

    fn incref(&mut self, b: BlockId) {
        let blk = &mut self.blocks[b as usize];
        if blk.refs == 0 {
            self.free.remove(&(blk.freed_at, b));
            self.used += 1;
        }
        blk.refs += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocate_until_full_then_free_to_zero() {
        let mut m = BlockManager::new(4);
        let got: Vec<_> = (0..4).map(|_| m.allocate().unwrap()).collect();
        assert_eq!(m.allocate(), None);
        assert_eq!(m.num_used(), 4);
        assert!((m.usage() - 1.0).abs() < f64::EPSILON);
        m.free(&got);
        assert_eq!(m.num_used(), 0);
        assert_eq!(m.num_free(), 4);
    }

    #[test]
    fn shared_prefix_is_reused_and_refcounted() {
        let mut m = BlockManager::new(8);
        let tokens: Vec<u32> = (0..40).collect();
        let keys = chain_keys(&tokens);
        assert_eq!(keys.len(), 2);
        let a: Vec<_> = keys.iter().map(|_| m.allocate().unwrap()).collect();
        for (b, k) in a.iter().zip(&keys) {
            m.seal(*b, *k);
        }
        assert_eq!(m.cached_prefix(&keys), 2);
        let b = m.take_cached(&keys);
        assert_eq!(a, b);
        assert_eq!(m.num_used(), 2);
        m.free(&a);
        assert_eq!(m.num_used(), 2);
        m.free(&b);
        assert_eq!(m.num_used(), 0);
        // Still cached after being freed...
        assert_eq!(m.cached_prefix(&keys), 2);
        // ...until the blocks are handed out for other content.
        for _ in 0..8 {
            m.allocate().unwrap();
        }
        assert_eq!(m.cached_prefix(&keys), 0);
    }

    #[test]
    fn a_reset_forgets_cached_prefixes_but_not_blocks_in_use() {
        let mut m = BlockManager::new(8);
        let keys = chain_keys(&(0..40).collect::<Vec<u32>>());
        let a: Vec<_> = keys.iter().map(|_| m.allocate().unwrap()).collect();
        for (b, k) in a.iter().zip(&keys) {
            m.seal(*b, *k);
        }
        m.free(&a[1..]);
        m.reset_prefix_cache();
        assert_eq!(m.cached_prefix(&keys), 0);
        assert_eq!(m.num_used(), 1);
        m.free(&a[..1]);
        assert_eq!(m.num_used(), 0);
        // The same content computed again is cached again.
        let b: Vec<_> = keys.iter().map(|_| m.allocate().unwrap()).collect();
        for (b, k) in b.iter().zip(&keys) {
            m.seal(*b, *k);
        }
        assert_eq!(m.cached_prefix(&keys), 2);
    }

    #[test]
    fn chain_keys_depend_on_the_whole_prefix() {
        let a: Vec<u32> = (0..32).collect();
        let mut b = a.clone();
        b[0] = 999;
        let (ka, kb) = (chain_keys(&a), chain_keys(&b));
        assert_ne!(ka[0], kb[0]);
        assert_ne!(ka[1], kb[1]);
        assert_eq!(chain_keys(&a[..31]).len(), 1);
    }
}

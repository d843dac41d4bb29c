//! Named profiles: each produces one bottleneck on purpose (see docs/sim.md).
//!
//! | profile       | what it does                                                                 |
//! |---------------|------------------------------------------------------------------------------|
//! | `healthy`     | defaults: plenty of KV blocks, 256 sequences, light cost model               |
//! | `kv-pressure` | 64 KV blocks (1024 tokens): the cache fills, running sequences get preempted  |
//! | `queue-bound` | `max_num_seqs` = 4: requests wait in the queue, KV usage stays low            |
//! | `gpu-memory`  | device memory = KV pool + workspace for 512 tokens: large prefills hit OOM   |
//! | `slow-index`  | 20 ms per vector query, a rebuild (500 ms spikes) every 15 s                  |
//! | `fixed`       | every request gets exactly TTFT 100 ms and ITL 20 ms, whatever the load      |

use super::config::{FixedTiming, SimConfig};

/// Names accepted by `--profile`.
pub const PROFILE_NAMES: &[&str] = &[
    "healthy",
    "kv-pressure",
    "queue-bound",
    "gpu-memory",
    "slow-index",
    "fixed",
];

/// Unknown profile name.
#[derive(Debug, thiserror::Error)]
#[error(
    "unknown sim profile {0:?}; known: healthy, kv-pressure, queue-bound, gpu-memory, slow-index, fixed"
)]
pub struct UnknownProfile(pub String);

/// The configuration of a named profile.
pub fn profile(name: &str) -> Result<SimConfig, UnknownProfile> {
    let mut c = SimConfig::default();
    match name {
        "healthy" => {}
        "kv-pressure" => {
            c.engine.num_gpu_blocks = 64;
        }
        "queue-bound" => {
            c.engine.max_num_seqs = 4;
        }
        "gpu-memory" => {
            // Just enough headroom for the workspace of a 512-token step: a bigger batch first
            // makes the caching allocator free its cache and retry, then fails requests.
            c.device.memory_bytes = c.kv_pool_bytes() + 512 * c.device.workspace_bytes_per_token;
        }
        "slow-index" => {
            c.vector.corpus_size = 20_000;
            c.vector.query_delay_ms = 20;
            c.vector.auto_rebuild_secs = 15;
        }
        "fixed" => {
            c.fixed = Some(FixedTiming {
                ttft_ms: 100.0,
                itl_ms: 20.0,
            });
        }
        other => return Err(UnknownProfile(other.to_owned())),
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_profile_is_valid_and_distinct() {
        let all: Vec<SimConfig> = PROFILE_NAMES.iter().map(|n| profile(n).unwrap()).collect();
        for (i, c) in all.iter().enumerate() {
            c.validate().unwrap();
            for d in &all[i + 1..] {
                assert_ne!(c, d);
            }
        }
        assert!(profile("nope").is_err());
    }

    #[test]
    fn gpu_memory_leaves_little_headroom() {
        let c = profile("gpu-memory").unwrap();
        assert!(c.device_memory_bytes() > c.kv_pool_bytes());
        assert!(c.device_memory_bytes() - c.kv_pool_bytes() < 64 << 20);
    }
}

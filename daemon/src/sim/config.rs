//! Configuration of the simulated inference server: engine, cost model, device, vector index,
//! faults and the `fixed` timing mode. Loadable from TOML (`--config sim.toml`); every field has
//! a default so a file only names what it changes.

use std::{path::Path, time::Duration};

use serde::{Deserialize, Serialize};

/// Errors while loading a configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// Path of the file.
        path: String,
        /// Underlying I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML for [`SimConfig`].
    #[error("invalid sim config {path}: {source}")]
    Parse {
        /// Path of the file.
        path: String,
        /// Underlying TOML error.
        source: Box<toml::de::Error>,
    },
    /// A value is out of its range.
    #[error("invalid sim config: {0}")]
    Invalid(String),
}

/// The whole configuration of one simulated server.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SimConfig {
    /// Model name served (`/v1/models`, the `model_name` metric label).
    pub model: String,
    /// Scheduler and KV-cache settings.
    pub engine: EngineConfig,
    /// Step-time cost model.
    pub cost: CostModel,
    /// Simulated CUDA device.
    pub device: DeviceConfig,
    /// Vector-search service.
    pub vector: VectorConfig,
    /// Fault injection.
    pub faults: FaultConfig,
    /// `POST /v1/rerank`.
    pub rerank: RerankConfig,
    /// Tool calls in chat answers.
    pub tools: ToolConfig,
    /// When set, the engine is bypassed and every request gets exactly this timing.
    pub fixed: Option<FixedTiming>,
}

/// vLLM-like scheduler settings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct EngineConfig {
    /// Most sequences running at once (vLLM `max_num_seqs`).
    pub max_num_seqs: usize,
    /// Most tokens (prefill + decode) in one step (vLLM `max_num_batched_tokens`).
    pub max_num_batched_tokens: usize,
    /// Number of KV-cache blocks of [`crate::sim::kv_cache::BLOCK_SIZE`] tokens.
    pub num_gpu_blocks: usize,
    /// Context length: prompt + completion tokens must fit.
    pub max_model_len: usize,
    /// Requests waiting beyond this are refused with 503.
    pub max_waiting: usize,
    /// Cache full blocks by hash chain and reuse them across requests.
    pub enable_prefix_caching: bool,
}

/// Step time = `fixed_us` + `per_prefill_token_us` * prefill tokens + `per_seq_us` * running
/// sequences. `cpu_fraction` of it is burnt as real CPU work on the engine thread; the rest is
/// "GPU" time: a kernel launch followed by a `cuStreamSynchronize` that blocks until it is done.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct CostModel {
    /// Fixed part of every step, microseconds.
    pub fixed_us: f64,
    /// Cost per prefill token scheduled in the step, microseconds.
    pub per_prefill_token_us: f64,
    /// Cost per sequence in the batch, microseconds.
    pub per_seq_us: f64,
    /// Share of the step time spent busy on the engine thread (0..=1).
    pub cpu_fraction: f64,
}

/// Simulated CUDA device (see [`crate::sim::device`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct DeviceConfig {
    /// Total device memory in bytes; 0 = KV pool + 1 GiB.
    pub memory_bytes: u64,
    /// Bytes of KV cache per token (all layers, K and V).
    pub kv_bytes_per_token: u64,
    /// Bytes of activation workspace per token batched in a step.
    pub workspace_bytes_per_token: u64,
}

/// Vector-search service.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct VectorConfig {
    /// Vectors in the synthetic corpus.
    pub corpus_size: usize,
    /// Dimension of corpus vectors and of `/v1/embeddings`.
    pub dim: usize,
    /// Seed of the synthetic corpus.
    pub seed: u64,
    /// `ef_search` when a query does not give one.
    pub default_ef_search: usize,
    /// Extra latency of each query while a rebuild runs, milliseconds.
    pub rebuild_spike_ms: u64,
    /// A rebuild lasts at least this long, milliseconds (a real one on a big index does).
    pub rebuild_min_ms: u64,
    /// Base latency of every query, milliseconds.
    pub query_delay_ms: u64,
    /// Start a rebuild automatically every this many seconds; 0 = never.
    pub auto_rebuild_secs: u64,
}

/// Injected faults.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct FaultConfig {
    /// Fraction (0..=1) of requests answered with a 500 error.
    pub error_rate: f64,
    /// Seed of the error draw, so runs are reproducible.
    pub seed: u64,
    /// A latency spike starts every this many milliseconds; 0 = no spikes.
    pub spike_every_ms: u64,
    /// Each spike lasts this long, milliseconds.
    pub spike_duration_ms: u64,
    /// Requests arriving during a spike are delayed by this much, milliseconds.
    pub spike_delay_ms: u64,
}

/// The re-ranker behind `POST /v1/rerank`: a request costs [`CostModel::step_time`] of its
/// (query, document) pair tokens and documents, on a simulated device of its own that runs
/// `concurrency` requests at a time (the others wait their turn, first come first served).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RerankConfig {
    /// Re-rank requests computed at once.
    pub concurrency: usize,
    /// A re-ranker on CPUs (TEI on a CPU node): its compute time is CPU time spent in a thread
    /// of the sim, so a CPU quota or a noisy neighbour stretches it; otherwise it is waited for
    /// (a device).
    pub on_cpu: bool,
}

/// Tool calls: a chat request that offers `tools` (and whose last message is not a tool
/// result) is answered with a call instead of text for a `call_rate` share of requests.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ToolConfig {
    /// Share (0..=1) of eligible requests answered with a tool call.
    pub call_rate: f64,
    /// Seed of the per-request draw (a hash of the messages with this seed).
    pub seed: u64,
}

/// Exact per-request timing of the `fixed` profile.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FixedTiming {
    /// Time to first token, milliseconds (from the request's arrival).
    pub ttft_ms: f64,
    /// Inter-token latency, milliseconds.
    pub itl_ms: f64,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            model: "inferscope-sim".to_owned(),
            engine: EngineConfig::default(),
            cost: CostModel::default(),
            device: DeviceConfig::default(),
            vector: VectorConfig::default(),
            faults: FaultConfig::default(),
            rerank: RerankConfig::default(),
            tools: ToolConfig::default(),
            fixed: None,
        }
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            max_num_seqs: 256,
            max_num_batched_tokens: 8192,
            num_gpu_blocks: 4096,
            max_model_len: 4096,
            max_waiting: 2048,
            enable_prefix_caching: true,
        }
    }
}

impl Default for CostModel {
    fn default() -> Self {
        Self {
            fixed_us: 2000.0,
            per_prefill_token_us: 5.0,
            per_seq_us: 20.0,
            cpu_fraction: 0.5,
        }
    }
}

impl CostModel {
    /// A model that costs nothing: measures the simulator's own overhead.
    #[must_use]
    pub fn zero() -> Self {
        Self {
            fixed_us: 0.0,
            per_prefill_token_us: 0.0,
            per_seq_us: 0.0,
            cpu_fraction: 1.0,
        }
    }

    /// Step time for a batch with `prefill_tokens` prompt tokens and `num_seqs` sequences.
    #[must_use]
    pub fn step_time(&self, prefill_tokens: usize, num_seqs: usize) -> Duration {
        let us = self.fixed_us
            + self.per_prefill_token_us * prefill_tokens as f64
            + self.per_seq_us * num_seqs as f64;
        Duration::from_secs_f64(us.max(0.0) / 1e6)
    }
}

impl Default for DeviceConfig {
    fn default() -> Self {
        Self {
            memory_bytes: 0,
            // A 1B-parameter-class model: 16 layers * 2 (K,V) * 8 heads * 64 dims * 2 bytes.
            kv_bytes_per_token: 32 * 1024,
            workspace_bytes_per_token: 64 * 1024,
        }
    }
}

impl Default for VectorConfig {
    fn default() -> Self {
        Self {
            corpus_size: 10_000,
            dim: 64,
            seed: 42,
            default_ef_search: 64,
            rebuild_spike_ms: 500,
            rebuild_min_ms: 2000,
            query_delay_ms: 0,
            auto_rebuild_secs: 0,
        }
    }
}

impl Default for FaultConfig {
    fn default() -> Self {
        Self {
            error_rate: 0.0,
            seed: 7,
            spike_every_ms: 0,
            spike_duration_ms: 0,
            spike_delay_ms: 0,
        }
    }
}

impl Default for RerankConfig {
    fn default() -> Self {
        Self {
            concurrency: 1,
            on_cpu: false,
        }
    }
}

impl Default for ToolConfig {
    fn default() -> Self {
        Self {
            call_rate: 1.0,
            seed: 11,
        }
    }
}

impl SimConfig {
    /// Reads a TOML file.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_toml(&text).map_err(|e| match e {
            ConfigError::Parse { source, .. } => ConfigError::Parse {
                path: path.display().to_string(),
                source,
            },
            other => other,
        })
    }

    /// Parses TOML text; unknown keys are errors.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let cfg: Self = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: "<text>".to_owned(),
            source: Box::new(e),
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks ranges that the engine relies on.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let e = &self.engine;
        let bad = |m: &str| Err(ConfigError::Invalid(m.to_owned()));
        if e.max_num_seqs == 0 || e.max_num_batched_tokens == 0 || e.num_gpu_blocks == 0 {
            return bad("max_num_seqs, max_num_batched_tokens and num_gpu_blocks must be > 0");
        }
        if e.max_model_len < 2 {
            return bad("max_model_len must be >= 2");
        }
        if !(0.0..=1.0).contains(&self.cost.cpu_fraction) {
            return bad("cost.cpu_fraction must be within 0..=1");
        }
        if !(0.0..=1.0).contains(&self.faults.error_rate) {
            return bad("faults.error_rate must be within 0..=1");
        }
        if !(0.0..=1.0).contains(&self.tools.call_rate) {
            return bad("tools.call_rate must be within 0..=1");
        }
        if self.rerank.concurrency == 0 {
            return bad("rerank.concurrency must be > 0");
        }
        if self.vector.dim == 0 {
            return bad("vector.dim must be > 0");
        }
        if let Some(f) = &self.fixed
            && (f.ttft_ms < 0.0
                || f.itl_ms < 0.0
                || !f.ttft_ms.is_finite()
                || !f.itl_ms.is_finite())
        {
            return bad("fixed.ttft_ms and fixed.itl_ms must be finite and >= 0");
        }
        Ok(())
    }

    /// Bytes of the KV pool the engine allocates on the device at start.
    #[must_use]
    pub fn kv_pool_bytes(&self) -> u64 {
        self.engine.num_gpu_blocks as u64
            * crate::sim::kv_cache::BLOCK_SIZE as u64
            * self.device.kv_bytes_per_token
    }

    /// Device memory in bytes, resolving the `0 = pool + 1 GiB` default.
    #[must_use]
    pub fn device_memory_bytes(&self) -> u64 {
        if self.device.memory_bytes == 0 {
            self.kv_pool_bytes() + (1 << 30)
        } else {
            self.device.memory_bytes
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_overrides_only_what_it_names() {
        let c = SimConfig::from_toml(
            "model = \"m\"\n[engine]\nnum_gpu_blocks = 10\n[fixed]\nttft_ms = 5.0\nitl_ms = 1.5\n",
        )
        .unwrap();
        assert_eq!(c.model, "m");
        assert_eq!(c.engine.num_gpu_blocks, 10);
        assert_eq!(c.engine.max_num_seqs, EngineConfig::default().max_num_seqs);
        assert_eq!(
            c.fixed,
            Some(FixedTiming {
                ttft_ms: 5.0,
                itl_ms: 1.5
            })
        );
        assert_eq!(c.kv_pool_bytes(), 10 * 16 * 32 * 1024);
        assert_eq!(c.device_memory_bytes(), c.kv_pool_bytes() + (1 << 30));
    }

    #[test]
    fn bad_files_are_errors() {
        assert!(matches!(
            SimConfig::from_toml("[engine]\nnum_gpu_blockz = 1"),
            Err(ConfigError::Parse { .. })
        ));
        assert!(matches!(
            SimConfig::from_toml("[engine]\nnum_gpu_blocks = 0"),
            Err(ConfigError::Invalid(_))
        ));
        assert!(matches!(
            SimConfig::from_toml("[faults]\nerror_rate = 2.0"),
            Err(ConfigError::Invalid(_))
        ));
        assert!(matches!(
            SimConfig::from_toml("[tools]\ncall_rate = 1.5"),
            Err(ConfigError::Invalid(_))
        ));
        assert!(matches!(
            SimConfig::from_toml("[rerank]\nconcurrency = 0"),
            Err(ConfigError::Invalid(_))
        ));
        assert!(matches!(
            SimConfig::from_file(Path::new("/nonexistent/sim.toml")),
            Err(ConfigError::Read { .. })
        ));
    }

    #[test]
    fn cost_model_adds_its_parts() {
        let c = CostModel {
            fixed_us: 100.0,
            per_prefill_token_us: 2.0,
            per_seq_us: 10.0,
            cpu_fraction: 0.5,
        };
        assert_eq!(c.step_time(50, 3), Duration::from_micros(230));
        assert_eq!(CostModel::zero().step_time(1000, 100), Duration::ZERO);
    }
}

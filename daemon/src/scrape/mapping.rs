//! Maps vLLM, `SGLang`, TGI and llama.cpp metric names onto one set of [`Signals`].
//!
//! A [`Signals`] value is what one scrape says at that instant: gauges as
//! values, counters and histograms as their cumulative totals. Turning two of
//! them into rates and window quantiles is [`super::window`]'s job.
//!
//! Several label sets of one metric (data-parallel engines, several models)
//! are combined: counts, counters and histogram buckets are summed; the KV
//! usage fraction takes the most loaded engine, because preemption starts in
//! whichever engine runs out first; a hit-rate gauge is averaged.

use serde::{Deserialize, Serialize};

use super::prom_text::{Exposition, Sample, parse_float};

/// Which inference server produced an exposition.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ServerKind {
    /// vLLM (`vllm:` names).
    Vllm,
    /// `SGLang` (`sglang:` names).
    Sglang,
    /// Hugging Face text-generation-inference (`tgi_` names).
    Tgi,
    /// llama.cpp's `llama-server` started with `--metrics` (`llamacpp:` names).
    LlamaCpp,
    /// None of the above.
    #[default]
    Unknown,
}

impl ServerKind {
    /// Whether no server was recognised.
    #[must_use]
    pub fn is_unknown(&self) -> bool {
        *self == ServerKind::Unknown
    }
}

/// A cumulative histogram as exposed: bucket upper bounds with cumulative counts.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Histogram {
    /// `(le, cumulative count)` sorted by `le`; the last bound is `+Inf` when exposed.
    pub buckets: Vec<(f64, f64)>,
    /// `_count`.
    pub count: f64,
    /// `_sum`.
    pub sum: f64,
}

impl Histogram {
    /// Cumulative count at the largest bound `<= le` (a step function), used
    /// to merge series whose bucket layouts differ.
    fn count_at(&self, le: f64) -> f64 {
        self.buckets
            .iter()
            .take_while(|(b, _)| *b <= le)
            .last()
            .map_or(0.0, |&(_, c)| c)
    }

    fn merge(&self, other: &Self) -> Self {
        let mut bounds: Vec<f64> = self
            .buckets
            .iter()
            .chain(&other.buckets)
            .map(|&(b, _)| b)
            .collect();
        bounds.sort_by(f64::total_cmp);
        bounds.dedup();
        let buckets = bounds
            .into_iter()
            .map(|le| (le, self.count_at(le) + other.count_at(le)))
            .collect();
        Self {
            buckets,
            count: self.count + other.count,
            sum: self.sum + other.sum,
        }
    }
}

/// Server-side signals of one scrape, in common units (counts, seconds, 0..1 fractions).
#[derive(Debug, Clone, PartialEq)]
pub struct Signals {
    /// The server the names came from.
    pub server: ServerKind,
    /// Requests in the running batch.
    pub running: Option<f64>,
    /// Requests waiting for admission.
    pub waiting: Option<f64>,
    /// KV-cache usage, 0..1 (most loaded engine).
    pub kv_usage: Option<f64>,
    /// KV-cache blocks on the GPU (vLLM `cache_config_info`), summed over engines.
    pub num_gpu_blocks: Option<u64>,
    /// The engine's cap on running requests, where it says it (`super::engine_info`).
    pub max_running: Option<f64>,
    /// Cumulative preemptions (vLLM counter).
    pub preemptions_total: Option<f64>,
    /// Requests retracted at the last retraction (`SGLang` gauge `num_retracted_reqs`).
    pub retracted_reqs: Option<f64>,
    /// Cumulative prefix-cache queries (vLLM; tokens, or blocks with the old names).
    pub prefix_cache_queries_total: Option<f64>,
    /// Cumulative prefix-cache hits, same unit as the queries.
    pub prefix_cache_hits_total: Option<f64>,
    /// Prefix-cache hit rate as a gauge, 0..1 (`SGLang` `cache_hit_rate`).
    pub prefix_cache_hit_rate: Option<f64>,
    /// Cumulative prompt (prefill) tokens.
    pub prompt_tokens_total: Option<f64>,
    /// Cumulative generated tokens.
    pub generation_tokens_total: Option<f64>,
    /// Cumulative seconds spent generating, summed over sequences (llama.cpp
    /// `tokens_predicted_seconds_total`): with the generated tokens, the time per output token.
    pub generation_seconds_total: Option<f64>,
    /// Cumulative engine steps (llama.cpp `n_decode_total`, `llama_decode()` calls).
    pub decode_steps_total: Option<f64>,
    /// Mean sequences per engine step since start (llama.cpp `n_busy_slots_per_decode`): an
    /// average since start, windowed with [`Self::decode_steps_total`].
    pub busy_slots_per_decode: Option<f64>,
    /// Queue time, seconds.
    pub queue_time: Option<Histogram>,
    /// Time to first token, seconds (TGI has none).
    pub ttft: Option<Histogram>,
    /// Inter-token latency, seconds (TGI: mean time per token of each request).
    pub itl: Option<Histogram>,
    /// Cumulative vector searches answered (a vector service beside or instead of an engine:
    /// `inferscope_sim_vector_searches_total`).
    pub vector_searches_total: Option<f64>,
    /// 1 while the vector index is being rebuilt (`inferscope_sim_vector_index_rebuilding`).
    pub index_rebuilding: Option<f64>,
    /// Cumulative index rebuilds completed (`inferscope_sim_vector_index_rebuilds_total`).
    pub index_rebuilds_total: Option<f64>,
}

/// Facts that are not in the exposition itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SignalOptions {
    /// TGI's `--max-batch-total-tokens`; without it TGI has no KV usage.
    pub tgi_max_batch_total_tokens: Option<u64>,
}

/// Detects the server from the metric names present (the most frequent prefix wins).
#[must_use]
pub fn detect_server(exp: &Exposition) -> ServerKind {
    let (mut vllm, mut sglang, mut tgi, mut llamacpp) = (0usize, 0usize, 0usize, 0usize);
    for fam in exp.families() {
        if fam.samples.is_empty() {
            continue;
        }
        if fam.name.starts_with("vllm:") {
            vllm += 1;
        } else if fam.name.starts_with("sglang:") {
            sglang += 1;
        } else if fam.name.starts_with("tgi_") {
            tgi += 1;
        } else if fam.name.starts_with("llamacpp:") {
            llamacpp += 1;
        }
    }
    [
        (vllm, ServerKind::Vllm),
        (sglang, ServerKind::Sglang),
        (tgi, ServerKind::Tgi),
        (llamacpp, ServerKind::LlamaCpp),
    ]
    .into_iter()
    .filter(|(n, _)| *n > 0)
    // The first of the most frequent: vLLM wins a tie, as it always did.
    .rev()
    .max_by_key(|(n, _)| *n)
    .map_or(ServerKind::Unknown, |(_, kind)| kind)
}

/// Extracts the common signals from one parsed exposition.
#[must_use]
pub fn extract(exp: &Exposition, opts: &SignalOptions) -> Signals {
    let server = detect_server(exp);
    let mut s = Signals {
        server,
        running: None,
        waiting: None,
        kv_usage: None,
        num_gpu_blocks: None,
        max_running: None,
        preemptions_total: None,
        retracted_reqs: None,
        prefix_cache_queries_total: None,
        prefix_cache_hits_total: None,
        prefix_cache_hit_rate: None,
        prompt_tokens_total: None,
        generation_tokens_total: None,
        generation_seconds_total: None,
        decode_steps_total: None,
        busy_slots_per_decode: None,
        queue_time: None,
        ttft: None,
        itl: None,
        vector_searches_total: sum(exp, "inferscope_sim_vector_searches_total"),
        index_rebuilding: max(exp, "inferscope_sim_vector_index_rebuilding"),
        index_rebuilds_total: sum(exp, "inferscope_sim_vector_index_rebuilds_total"),
    };
    match server {
        ServerKind::Vllm => {
            s.running = sum(exp, "vllm:num_requests_running");
            s.waiting = sum(exp, "vllm:num_requests_waiting");
            s.kv_usage = max(exp, "vllm:kv_cache_usage_perc")
                .or_else(|| max(exp, "vllm:gpu_cache_usage_perc"));
            s.num_gpu_blocks = gpu_blocks(exp);
            s.preemptions_total = sum(exp, "vllm:num_preemptions_total");
            s.prefix_cache_queries_total = sum(exp, "vllm:prefix_cache_queries_total")
                .or_else(|| sum(exp, "vllm:gpu_prefix_cache_queries_total"));
            s.prefix_cache_hits_total = sum(exp, "vllm:prefix_cache_hits_total")
                .or_else(|| sum(exp, "vllm:gpu_prefix_cache_hits_total"));
            s.prompt_tokens_total = sum(exp, "vllm:prompt_tokens_total");
            s.generation_tokens_total = sum(exp, "vllm:generation_tokens_total");
            s.queue_time = histogram(exp, "vllm:request_queue_time_seconds");
            s.ttft = histogram(exp, "vllm:time_to_first_token_seconds");
            // The newer name supersedes TPOT; both are per-token gaps in V1.
            s.itl = histogram(exp, "vllm:inter_token_latency_seconds")
                .or_else(|| histogram(exp, "vllm:time_per_output_token_seconds"));
        }
        ServerKind::Sglang => {
            s.running = sum(exp, "sglang:num_running_reqs");
            s.waiting = sum(exp, "sglang:num_queue_reqs");
            s.kv_usage = max(exp, "sglang:token_usage");
            s.retracted_reqs = sum(exp, "sglang:num_retracted_reqs");
            s.prefix_cache_hit_rate = mean(exp, "sglang:cache_hit_rate");
            s.prompt_tokens_total = sum(exp, "sglang:prompt_tokens_total");
            s.generation_tokens_total = sum(exp, "sglang:generation_tokens_total");
            s.queue_time = histogram(exp, "sglang:queue_time_seconds");
            s.ttft = histogram(exp, "sglang:time_to_first_token_seconds");
            s.itl = histogram(exp, "sglang:inter_token_latency_seconds")
                .or_else(|| histogram(exp, "sglang:time_per_output_token_seconds"));
        }
        ServerKind::Tgi => {
            s.running = sum(exp, "tgi_batch_current_size");
            s.waiting = sum(exp, "tgi_queue_size");
            s.kv_usage = match (
                sum(exp, "tgi_batch_current_max_tokens"),
                opts.tgi_max_batch_total_tokens,
            ) {
                (Some(used), Some(cap)) if cap > 0 => Some((used / cap as f64).clamp(0.0, 1.0)),
                _ => None,
            };
            // TGI records token counts per finished request in histograms; their sums count tokens.
            s.prompt_tokens_total = sum(exp, "tgi_request_input_length_sum");
            s.generation_tokens_total = sum(exp, "tgi_request_generated_tokens_sum");
            s.queue_time = histogram(exp, "tgi_request_queue_duration");
            s.itl = histogram(exp, "tgi_request_mean_time_per_token_duration");
        }
        // tools/server/server-task.cpp, `server_task_result_metrics::to_metrics`: slots decoding
        // (`requests_processing`), tasks deferred for want of a free slot (`requests_deferred`),
        // prompt tokens evaluated (cached ones excluded) and tokens generated. It exports no KV
        // usage, queue time or latency histograms; releases before the KV gauge was removed
        // exported `kv_cache_usage_ratio`, taken when present. Its step counter and the mean busy
        // slots per step (since start) give the batch of a window; seconds spent generating over
        // tokens generated, the time per output token (both counted when a request ends).
        ServerKind::LlamaCpp => {
            s.running = sum(exp, "llamacpp:requests_processing");
            s.waiting = sum(exp, "llamacpp:requests_deferred");
            s.kv_usage = max(exp, "llamacpp:kv_cache_usage_ratio");
            s.prompt_tokens_total = sum(exp, "llamacpp:prompt_tokens_total");
            s.generation_tokens_total = sum(exp, "llamacpp:tokens_predicted_total");
            s.generation_seconds_total = sum(exp, "llamacpp:tokens_predicted_seconds_total");
            s.decode_steps_total = sum(exp, "llamacpp:n_decode_total");
            s.busy_slots_per_decode = max(exp, "llamacpp:n_busy_slots_per_decode");
        }
        ServerKind::Unknown => {}
    }
    s
}

/// Finite-valued samples whose own name is `name`, wherever the family is.
fn samples<'a>(exp: &'a Exposition, name: &str) -> impl Iterator<Item = &'a Sample> {
    let bases = [
        Some(name),
        name.strip_suffix("_total"),
        name.strip_suffix("_sum"),
        name.strip_suffix("_count"),
        name.strip_suffix("_bucket"),
    ];
    let mut seen = Vec::new();
    let fams: Vec<_> = bases
        .into_iter()
        .flatten()
        .filter_map(|b| exp.family(b))
        .filter(|f| {
            // Two bases can resolve to the same family; visit it once.
            let dup = seen.contains(&f.name.as_str());
            seen.push(f.name.as_str());
            !dup
        })
        .collect();
    let name = name.to_owned();
    fams.into_iter()
        .flat_map(|f| &f.samples)
        .filter(move |s| s.name == name && s.value.is_finite())
}

fn sum(exp: &Exposition, name: &str) -> Option<f64> {
    samples(exp, name).map(|s| s.value).reduce(|a, b| a + b)
}

fn max(exp: &Exposition, name: &str) -> Option<f64> {
    samples(exp, name).map(|s| s.value).reduce(f64::max)
}

fn mean(exp: &Exposition, name: &str) -> Option<f64> {
    let (n, total) = samples(exp, name).fold((0usize, 0.0), |(n, t), s| (n + 1, t + s.value));
    (n > 0).then(|| total / n as f64)
}

fn gpu_blocks(exp: &Exposition) -> Option<u64> {
    samples(exp, "vllm:cache_config_info")
        .filter_map(|s| s.label("num_gpu_blocks")?.parse::<u64>().ok())
        .reduce(u64::saturating_add)
}

/// The histogram `base`, all label sets merged bucket by bucket. Works
/// whether or not a `# TYPE base histogram` line grouped the samples.
fn histogram(exp: &Exposition, base: &str) -> Option<Histogram> {
    let parts = ["_bucket", "_count", "_sum"].map(|suffix| format!("{base}{suffix}"));
    // One series per label set without `le`.
    let mut series: Vec<(Vec<(String, String)>, Histogram)> = Vec::new();
    for s in parts.iter().flat_map(|name| samples(exp, name)) {
        let key: Vec<(String, String)> = s
            .labels
            .iter()
            .filter(|(k, _)| k != "le")
            .cloned()
            .collect();
        let idx = if let Some(i) = series.iter().position(|(k, _)| *k == key) {
            i
        } else {
            series.push((key, Histogram::default()));
            series.len() - 1
        };
        let h = &mut series[idx].1;
        let rest = s.name.strip_prefix(base).unwrap_or("");
        match rest {
            "_bucket" => {
                if let Some(le) = s.label("le").and_then(parse_float) {
                    h.buckets.push((le, s.value));
                }
            }
            "_count" => h.count = s.value,
            "_sum" => h.sum = s.value,
            _ => {}
        }
    }
    let mut merged: Option<Histogram> = None;
    for (_, mut h) in series {
        if h.buckets.is_empty() {
            continue;
        }
        h.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        merged = Some(match merged {
            None => h,
            Some(m) => m.merge(&h),
        });
    }
    merged
}

#[cfg(test)]
#[path = "mapping_tests.rs"]
mod tests;

//! `GET /metrics`: Prometheus text format with vLLM's metric names, types, buckets and the
//! `model_name` label, so scrapers cannot tell the simulator from vLLM.

use std::{
    fmt::Write as _,
    sync::atomic::{AtomicU64, Ordering},
};

use super::exposition::{counter, gauge};

/// vLLM's buckets for `time_to_first_token_seconds`.
pub const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// vLLM's buckets for `inter_token_latency_seconds`.
pub const ITL_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
/// vLLM's request-latency buckets (e2e and queue time).
pub const REQUEST_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];

/// A cumulative Prometheus histogram.
#[derive(Debug, Clone)]
pub struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    /// An empty histogram over `bounds` (ascending upper bounds, `+Inf` implied).
    #[must_use]
    pub fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    /// Records one value.
    pub fn observe(&mut self, v: f64) {
        if let Some(i) = self.bounds.iter().position(|b| v <= *b) {
            self.counts[i] += 1;
        }
        self.sum += v;
        self.count += 1;
    }

    /// Observations so far.
    #[must_use]
    pub fn count(&self) -> u64 {
        self.count
    }

    fn render(&self, out: &mut String, name: &str, help: &str, labels: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut acc = 0;
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            acc += c;
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{b:?}\"}} {acc}");
        }
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum{{{labels}}} {:?}", self.sum);
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", self.count);
    }
}

/// Values only the engine knows at render time.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Gauges {
    /// Sequences running.
    pub running: usize,
    /// Sequences waiting.
    pub waiting: usize,
    /// KV blocks in use / total.
    pub kv_usage: f64,
}

/// All metrics of one server.
#[derive(Debug, Clone)]
pub struct Metrics {
    model: String,
    num_gpu_blocks: usize,
    /// Whether prefix caching is on (reported in `vllm:cache_config_info`).
    pub prefix_caching: bool,
    /// Current gauges.
    pub gauges: Gauges,
    /// Preemptions.
    pub preemptions: u64,
    /// Prefix-cache token queries.
    pub prefix_queries: u64,
    /// Prefix-cache token hits.
    pub prefix_hits: u64,
    /// Prompt tokens processed.
    pub prompt_tokens: u64,
    /// Tokens generated.
    pub generation_tokens: u64,
    /// Finished requests by reason (`stop`, `length`, `error`, `abort`).
    pub success: [(&'static str, u64); 4],
    /// TTFT.
    pub ttft: Histogram,
    /// ITL.
    pub itl: Histogram,
    /// End-to-end latency.
    pub e2e: Histogram,
    /// Queue time.
    pub queue: Histogram,
    /// The `fixed` profile's exact lateness against its schedule (`None` for the others).
    pub lateness: Option<super::lateness::Lateness>,
}

impl Metrics {
    /// Empty metrics for `model` with a cache of `num_gpu_blocks`.
    #[must_use]
    pub fn new(model: &str, num_gpu_blocks: usize) -> Self {
        Self {
            model: model.to_owned(),
            num_gpu_blocks,
            prefix_caching: true,
            gauges: Gauges::default(),
            preemptions: 0,
            prefix_queries: 0,
            prefix_hits: 0,
            prompt_tokens: 0,
            generation_tokens: 0,
            success: [("stop", 0), ("length", 0), ("error", 0), ("abort", 0)],
            ttft: Histogram::new(TTFT_BUCKETS),
            itl: Histogram::new(ITL_BUCKETS),
            e2e: Histogram::new(REQUEST_BUCKETS),
            queue: Histogram::new(REQUEST_BUCKETS),
            lateness: None,
        }
    }

    /// Counts a finished request by reason.
    pub fn finished(&mut self, reason: &str) {
        if let Some(e) = self.success.iter_mut().find(|(r, _)| *r == reason) {
            e.1 += 1;
        }
    }

    /// The exposition text.
    #[must_use]
    pub fn render(&self) -> String {
        let l = format!("model_name=\"{}\"", escape(&self.model));
        let mut o = String::with_capacity(16 * 1024);
        let g = &self.gauges;
        gauge(
            &mut o,
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            &l,
            g.running as f64,
        );
        gauge(
            &mut o,
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            &l,
            g.waiting as f64,
        );
        gauge(
            &mut o,
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            &l,
            g.kv_usage,
        );
        counter(
            &mut o,
            "vllm:num_preemptions_total",
            "Cumulative number of preemption from the engine.",
            &l,
            self.preemptions,
        );
        counter(
            &mut o,
            "vllm:prefix_cache_queries_total",
            "Prefix cache queries, in terms of number of queried tokens.",
            &l,
            self.prefix_queries,
        );
        counter(
            &mut o,
            "vllm:prefix_cache_hits_total",
            "Prefix cache hits, in terms of number of cached tokens.",
            &l,
            self.prefix_hits,
        );
        counter(
            &mut o,
            "vllm:prompt_tokens_total",
            "Number of prefill tokens processed.",
            &l,
            self.prompt_tokens,
        );
        counter(
            &mut o,
            "vllm:generation_tokens_total",
            "Number of generation tokens processed.",
            &l,
            self.generation_tokens,
        );
        let name = "vllm:request_success_total";
        let _ = writeln!(
            o,
            "# HELP {name} Count of successfully processed requests.\n# TYPE {name} counter"
        );
        for (reason, n) in &self.success[..2] {
            let _ = writeln!(o, "{name}{{finished_reason=\"{reason}\",{l}}} {n}");
        }
        self.ttft.render(
            &mut o,
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            &l,
        );
        self.itl.render(
            &mut o,
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            &l,
        );
        self.e2e.render(
            &mut o,
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            &l,
        );
        self.queue.render(
            &mut o,
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            &l,
        );
        self.render_cache_config(&mut o);
        if let Some(late) = &self.lateness {
            o.push_str(&late.render(&l));
        }
        o
    }

    fn render_cache_config(&self, o: &mut String) {
        let name = "vllm:cache_config_info";
        let _ = writeln!(
            o,
            "# HELP {name} Information of the LLMEngine CacheConfig\n# TYPE {name} gauge\n\
             {name}{{block_size=\"{}\",cache_dtype=\"auto\",enable_prefix_caching=\"{}\",num_gpu_blocks=\"{}\"}} 1.0",
            super::kv_cache::BLOCK_SIZE,
            if self.prefix_caching { "True" } else { "False" },
            self.num_gpu_blocks
        );
    }
}

/// Counters of the sim's endpoints that vLLM has no metric for: embeddings, re-ranking and
/// tool calls (vector searches are the vector service's own).
#[derive(Debug, Default)]
pub struct ApiCounters {
    /// `POST /v1/embeddings` requests answered.
    pub embedding_requests: AtomicU64,
    /// `POST /v1/rerank` requests answered.
    pub rerank_requests: AtomicU64,
    /// Documents those requests scored.
    pub rerank_documents: AtomicU64,
    /// Chat answers that were a tool call.
    pub tool_calls: AtomicU64,
    /// `POST /v1/tools/{name}` calls answered.
    pub tool_results: AtomicU64,
}

impl ApiCounters {
    /// Counts one answered re-rank request of `documents` documents.
    pub fn reranked(&self, documents: usize) {
        self.rerank_requests.fetch_add(1, Ordering::Relaxed);
        self.rerank_documents
            .fetch_add(documents as u64, Ordering::Relaxed);
    }

    /// The exposition text of these counters.
    #[must_use]
    pub fn render(&self) -> String {
        let mut o = String::new();
        for (name, help, v) in [
            (
                "inferscope_sim_embedding_requests_total",
                "Embedding requests answered.",
                &self.embedding_requests,
            ),
            (
                "inferscope_sim_rerank_requests_total",
                "Re-rank requests answered.",
                &self.rerank_requests,
            ),
            (
                "inferscope_sim_rerank_documents_total",
                "Documents scored by re-rank requests.",
                &self.rerank_documents,
            ),
            (
                "inferscope_sim_tool_calls_total",
                "Chat answers that were a tool call.",
                &self.tool_calls,
            ),
            (
                "inferscope_sim_tool_results_total",
                "Tool calls answered by POST /v1/tools/{name}.",
                &self.tool_results,
            ),
        ] {
            counter(&mut o, name, help, "", v.load(Ordering::Relaxed));
        }
        o
    }
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::exposition::sample;

    #[test]
    fn renders_vllm_names_and_cumulative_buckets() {
        let mut m = Metrics::new("m\"x", 64);
        m.ttft.observe(0.003);
        m.ttft.observe(0.3);
        m.ttft.observe(9999.0);
        m.preemptions = 3;
        m.gauges.kv_usage = 0.5;
        let t = m.render();
        assert!(t.contains("# TYPE vllm:num_preemptions_total counter"));
        assert_eq!(sample(&t, "vllm:num_preemptions_total"), Some(3.0));
        assert_eq!(sample(&t, "vllm:kv_cache_usage_perc"), Some(0.5));
        assert!(t.contains(
            "vllm:time_to_first_token_seconds_bucket{model_name=\"m\\\"x\",le=\"0.005\"} 1\n"
        ));
        assert!(t.contains(
            "vllm:time_to_first_token_seconds_bucket{model_name=\"m\\\"x\",le=\"0.5\"} 2\n"
        ));
        assert!(t.contains("le=\"+Inf\"} 3\n"));
        assert!(t.contains("num_gpu_blocks=\"64\""));
    }

    #[test]
    fn api_counters_render_as_counters() {
        let c = ApiCounters::default();
        c.reranked(5);
        c.reranked(2);
        c.tool_calls.fetch_add(3, Ordering::Relaxed);
        let t = c.render();
        assert!(t.contains("# TYPE inferscope_sim_rerank_requests_total counter"));
        assert_eq!(
            sample(&t, "inferscope_sim_rerank_requests_total"),
            Some(2.0)
        );
        assert_eq!(
            sample(&t, "inferscope_sim_rerank_documents_total"),
            Some(7.0)
        );
        assert_eq!(sample(&t, "inferscope_sim_tool_calls_total"), Some(3.0));
    }
}

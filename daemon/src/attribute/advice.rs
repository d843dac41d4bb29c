//! What an operator can do about a cause, in the terms of the engine the scrape recognised
//! (vLLM, `SGLang`, TGI, llama.cpp), or in neutral terms when it recognised none.

use super::verdict::Cause;
use crate::collect::timeline::Window;
use crate::scrape::ServerKind;

/// What to do about `cause` on an `engine` server: its own flags and settings where the advice
/// names a knob, neutral words for [`ServerKind::Unknown`].
#[must_use]
pub fn hint(cause: Cause, engine: ServerKind) -> &'static str {
    match cause {
        Cause::KvCache => kv_cache(engine),
        Cause::GpuMemory => gpu_memory(engine),
        Cause::DuplicatePrefill => {
            "identical requests arrive together and each prefills the same prompt: coalesce \
             them in front of the server (answer one, fan the answer out), keep the hot \
             prefix warm (send it once before its traffic, or pin it), stagger retries and \
             scheduled jobs that fire together"
        }
        Cause::Queue => queue(engine),
        Cause::Compute => compute(engine),
        Cause::GpuThrottle => {
            "the GPU runs below its clocks (power cap or thermal limit): check its cooling and \
             power delivery, raise the power limit where policy allows (nvidia-smi -pl), or \
             spread the load over more GPUs; the clock event reasons name which limit"
        }
        Cause::CpuRunqueue => cpu_runqueue(engine),
        Cause::Network => {
            "the network path adds latency: check the path, MTU, congestion and \
             retransmits between client and server; a first-token transit that grows with \
             the RTT flat is small writes waiting for ACKs (Nagle with delayed ACKs): set \
             TCP_NODELAY on the server's sockets"
        }
        Cause::Loadgen => {
            "the load generator cannot keep its schedule: give it more CPU or shard it \
             (--shard i/N); latencies of these windows are untrustworthy"
        }
        Cause::VectorIndex => {
            "the vector index slows searches or loses recall: schedule rebuilds off-peak or \
             on a replica, raise ef_search only where recall needs it, rebuild when recall \
             drifts below its target"
        }
        Cause::Errors => {
            "requests fail: fix the errors first (see the error classes); latencies of \
             failing windows describe only what succeeded"
        }
        Cause::Unexplained => {
            "latency rose but no cause is convincing: run with the missing evidence (root \
             for kernel probes, the server's /metrics) or look at the decomposition's \
             unexplained part"
        }
        Cause::None => "no bottleneck found",
    }
}

/// The engine the scrape recognised in most of `windows` (ties to the first seen);
/// [`ServerKind::Unknown`] when it recognised none.
#[must_use]
pub fn engine_of<'a>(windows: impl IntoIterator<Item = &'a Window>) -> ServerKind {
    let mut counts: Vec<(ServerKind, usize)> = Vec::new();
    let known = windows
        .into_iter()
        .filter_map(|w| w.server.as_ref().map(|s| s.engine))
        .filter(|&e| e != ServerKind::Unknown);
    for engine in known {
        match counts.iter_mut().find(|(e, _)| *e == engine) {
            Some((_, n)) => *n += 1,
            None => counts.push((engine, 1)),
        }
    }
    counts
        .into_iter()
        .rev()
        .max_by_key(|&(_, n)| n)
        .map_or(ServerKind::Unknown, |(e, _)| e)
}

fn kv_cache(engine: ServerKind) -> &'static str {
    match engine {
        ServerKind::Vllm => {
            "KV cache is full: raise gpu_memory_utilization, or lower max_num_seqs / \
             max_model_len; enable prefix caching; add replicas"
        }
        ServerKind::Sglang => {
            "KV cache is full: raise --mem-fraction-static, or lower --max-running-requests / \
             --context-length; keep the radix cache on (no --disable-radix-cache); add replicas"
        }
        ServerKind::Tgi => {
            "KV cache is full: lower --max-batch-size or --max-total-tokens, or give the cache \
             more of the GPU (--cuda-memory-fraction) so --max-batch-total-tokens can grow; add \
             replicas"
        }
        ServerKind::LlamaCpp => {
            "KV cache is full: raise --ctx-size (its slots share it: each gets ctx-size / \
             --parallel), or lower --parallel; quantise the cache (--cache-type-k / \
             --cache-type-v q8_0); add replicas"
        }
        ServerKind::Unknown => {
            "KV cache is full: give the server more memory for its KV cache, or cap its \
             concurrent sequences or context length; enable prefix caching; add replicas"
        }
    }
}

fn gpu_memory(engine: ServerKind) -> &'static str {
    match engine {
        ServerKind::Vllm => {
            "GPU memory outside the KV cache runs out: lower gpu_memory_utilization to leave \
             headroom for activations/graphs, check other processes on the GPU (nvidia-smi)"
        }
        ServerKind::Sglang => {
            "GPU memory outside the KV cache runs out: lower --mem-fraction-static to leave \
             headroom for activations/CUDA graphs, check other processes on the GPU \
             (nvidia-smi)"
        }
        ServerKind::Tgi => {
            "GPU memory outside the KV cache runs out: lower --cuda-memory-fraction or \
             --max-batch-prefill-tokens to leave headroom, check other processes on the GPU \
             (nvidia-smi)"
        }
        ServerKind::LlamaCpp => {
            "GPU memory outside the KV cache runs out: offload fewer layers (--n-gpu-layers) \
             or lower --batch-size / --ubatch-size, check other processes on the GPU \
             (nvidia-smi)"
        }
        ServerKind::Unknown => {
            "GPU memory outside the KV cache runs out: leave the engine headroom for \
             activations (a smaller share of the memory for its KV cache), check other \
             processes on the GPU (nvidia-smi)"
        }
    }
}

fn queue(engine: ServerKind) -> &'static str {
    match engine {
        ServerKind::Vllm => {
            "requests wait for admission: add replicas, or raise max_num_seqs / \
             max_num_batched_tokens if KV usage allows"
        }
        ServerKind::Sglang => {
            "requests wait for admission: add replicas, or raise --max-running-requests / \
             --chunked-prefill-size if KV usage allows"
        }
        ServerKind::Tgi => {
            "requests wait for admission: add replicas, or raise --max-batch-size / \
             --max-batch-prefill-tokens if KV usage allows"
        }
        ServerKind::LlamaCpp => {
            "requests wait for a free slot: add replicas, or raise --parallel (and --ctx-size \
             with it: each slot gets ctx-size / --parallel)"
        }
        ServerKind::Unknown => {
            "requests wait for admission: add replicas, or raise the server's cap on \
             concurrent requests if KV usage allows"
        }
    }
}

fn compute(engine: ServerKind) -> &'static str {
    match engine {
        ServerKind::Vllm => {
            "the engine's compute is saturated (each step slower as the batch grows): for \
             latency, cap concurrent sequences (max_num_seqs); for throughput, add replicas; a \
             faster model or quantisation, or speculative decoding, shortens each step"
        }
        ServerKind::Sglang => {
            "the engine's compute is saturated (each step slower as the batch grows): for \
             latency, cap concurrent requests (--max-running-requests); for throughput, add \
             replicas; a faster model or quantisation, or speculative decoding, shortens each \
             step"
        }
        ServerKind::Tgi => {
            "the engine's compute is saturated (each step slower as the batch grows): for \
             latency, cap the batch (--max-batch-size); for throughput, add replicas; a faster \
             model or quantisation (--quantize), or speculative decoding, shortens each step"
        }
        ServerKind::LlamaCpp => {
            "the engine's compute is saturated (each step slower as the batch grows): for \
             latency, use fewer slots (--parallel); on CPU, set -t / --threads to the physical \
             cores it has to itself; for throughput, add replicas; a smaller quantisation, or \
             speculative decoding (--model-draft), shortens each step"
        }
        ServerKind::Unknown => {
            "the engine's compute is saturated (each step slower as the batch grows): for \
             latency, cap concurrent sequences; for throughput, add replicas; a faster model or \
             quantisation, or speculative decoding, shortens each step"
        }
    }
}

fn cpu_runqueue(engine: ServerKind) -> &'static str {
    match engine {
        ServerKind::LlamaCpp => {
            "server threads wait for a CPU: set -t / --threads (and --threads-batch) to the \
             cores llama-server has to itself, pin/isolate them, reduce co-located load, raise \
             CPU requests/limits"
        }
        _ => {
            "server threads wait for a CPU: pin/isolate the server's CPUs, reduce co-located \
             load, raise CPU requests/limits"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::timeline::ServerSignals;

    const KNOBS: [Cause; 4] = [
        Cause::KvCache,
        Cause::GpuMemory,
        Cause::Queue,
        Cause::Compute,
    ];

    /// Each engine's own knobs, and none of another engine's.
    #[test]
    fn advice_speaks_the_engines_own_terms() {
        let vllm = ["gpu_memory_utilization", "max_num_seqs"];
        let sglang = ["--mem-fraction-static", "--max-running-requests"];
        let tgi = ["--max-batch-size", "--cuda-memory-fraction"];
        let llamacpp = ["--parallel", "--ctx-size", "--threads", "--n-gpu-layers"];
        let all: Vec<&str> = [&vllm[..], &sglang, &tgi, &llamacpp].concat();
        for (engine, own) in [
            (ServerKind::Vllm, &vllm[..]),
            (ServerKind::Sglang, &sglang),
            (ServerKind::Tgi, &tgi),
            (ServerKind::LlamaCpp, &llamacpp),
            (ServerKind::Unknown, &[]),
        ] {
            let text: String = Cause::ALL
                .iter()
                .map(|&c| hint(c, engine))
                .collect::<Vec<_>>()
                .join("\n");
            for knob in &all {
                assert_eq!(
                    text.contains(knob),
                    own.contains(knob),
                    "{engine:?} and {knob}:\n{text}"
                );
            }
        }
        assert!(hint(Cause::KvCache, ServerKind::LlamaCpp).contains("--ctx-size"));
        assert!(hint(Cause::Queue, ServerKind::LlamaCpp).contains("--parallel"));
        assert!(hint(Cause::CpuRunqueue, ServerKind::LlamaCpp).contains("-t / --threads"));
        assert!(hint(Cause::KvCache, ServerKind::Vllm).contains("gpu_memory_utilization"));
        assert!(hint(Cause::Loadgen, ServerKind::Unknown).contains("--shard"));
    }

    /// The knob causes differ per engine; the others say the same whatever the engine.
    #[test]
    fn only_engine_knobs_change_with_the_engine() {
        for c in Cause::ALL {
            let neutral = hint(c, ServerKind::Unknown);
            let differs = [ServerKind::Vllm, ServerKind::Sglang, ServerKind::Tgi]
                .into_iter()
                .any(|e| hint(c, e) != neutral);
            assert_eq!(differs, KNOBS.contains(&c), "{c}");
        }
    }

    #[test]
    fn engine_of_takes_the_most_recognised_one() {
        let w = |engine: Option<ServerKind>| Window {
            server: engine.map(|engine| ServerSignals {
                engine,
                ..ServerSignals::default()
            }),
            ..Window::default()
        };
        let windows = [
            w(None),
            w(Some(ServerKind::Unknown)),
            w(Some(ServerKind::LlamaCpp)),
            w(Some(ServerKind::LlamaCpp)),
            w(Some(ServerKind::Vllm)),
        ];
        assert_eq!(engine_of(&windows), ServerKind::LlamaCpp);
        assert_eq!(engine_of(&windows[..2]), ServerKind::Unknown);
    }
}

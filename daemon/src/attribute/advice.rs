//! What an operator can do about a cause, in the terms of the engine the scrape recognised
//! (vLLM, `SGLang`, TGI, llama.cpp), or in neutral terms when it recognised none.

use std::fmt::Write as _;

use super::resources::{Occupancy, Resource};
use super::verdict::Cause;
use crate::collect::timeline::Window;
use crate::scrape::ServerKind;

/// What the evidence says about the room left in each resource advice may lean on: advice
/// never suggests raising a limit whose increase a full resource would swallow (more admitted
/// sequences need KV cache; a larger cache needs device memory).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Headroom {
    /// Full in at least one of the windows the advice is for.
    pub full: Vec<Resource>,
    /// Measured in them (full or not).
    pub measured: Vec<Resource>,
}

impl Headroom {
    /// The room in `occupancies`' resources: full where any of them is full.
    #[must_use]
    pub fn of<'a>(occupancies: impl IntoIterator<Item = &'a Occupancy>) -> Self {
        let mut h = Self::default();
        for o in occupancies {
            for r in [Resource::Slots, Resource::KvCache, Resource::DeviceMemory] {
                let measured = match r {
                    Resource::Slots => o.slots.is_some(),
                    Resource::KvCache => o.kv.is_some() || o.preemptions_per_s.is_some(),
                    Resource::DeviceMemory => o.device_memory.is_some(),
                };
                if measured && !h.measured.contains(&r) {
                    h.measured.push(r);
                }
                if o.is_full(r) && !h.full.contains(&r) {
                    h.full.push(r);
                }
            }
        }
        h
    }
}

/// One piece of advice: the resource it needs room in, and the resource whose being full it
/// answers (raising the slot cap helps only when every slot is taken).
struct Clause {
    text: &'static str,
    needs_room: Option<Resource>,
    answers: Option<Resource>,
}

/// A clause that needs nothing and answers any state.
const fn always(text: &'static str) -> Clause {
    Clause {
        text,
        needs_room: None,
        answers: None,
    }
}

/// A clause that needs room in `needs_room`.
const fn room(text: &'static str, needs_room: Resource) -> Clause {
    Clause {
        text,
        needs_room: Some(needs_room),
        answers: None,
    }
}

impl Clause {
    /// Whether the clause may be given: its resource has room, and what it answers is full
    /// (or unmeasured).
    fn holds(&self, room: &Headroom) -> bool {
        self.needs_room.is_none_or(|r| !room.full.contains(&r))
            && self
                .answers
                .is_none_or(|r| room.full.contains(&r) || !room.measured.contains(&r))
    }

    /// The clause, qualified where the evidence could not say (`if the KV cache has room`,
    /// `when every admission slot is taken`).
    fn text(&self, room: &Headroom) -> String {
        let mut text = self.text.to_owned();
        if let Some(r) = self.answers.filter(|r| !room.measured.contains(r)) {
            let _ = write!(text, " when the {} are all taken", r.name());
        }
        if let Some(r) = self.needs_room.filter(|r| !room.measured.contains(r)) {
            let _ = write!(text, " if the {} has room", r.name());
        }
        text
    }
}

/// `lead: clause; clause ...`: the clauses that hold (`Clause::holds`), qualified where the
/// evidence could not say.
fn render(lead: &str, clauses: &[Clause], room: &Headroom) -> String {
    let parts: Vec<String> = clauses
        .iter()
        .filter(|c| c.holds(room))
        .map(|c| c.text(room))
        .collect();
    format!("{lead}: {}", parts.join("; "))
}

/// What to do about `cause` on an `engine` server, given the `room` the evidence shows: its
/// own flags and settings where the advice names a knob, neutral words for
/// [`ServerKind::Unknown`].
#[must_use]
pub fn hint(cause: Cause, engine: ServerKind, room: &Headroom) -> String {
    match cause {
        Cause::KvCache => render("KV cache is full", &kv_cache(engine), room),
        Cause::Queue => render(queue_lead(engine), &queue(engine), room),
        other => fixed(other, engine).to_owned(),
    }
}

/// The advice that leans on no resource's room.
fn fixed(cause: Cause, engine: ServerKind) -> &'static str {
    match cause {
        Cause::KvCache | Cause::Queue => unreachable!("rendered from clauses"),
        Cause::GpuMemory => gpu_memory(engine),
        Cause::DuplicatePrefill => {
            "identical requests arrive together and each prefills the same prompt: coalesce \
             them in front of the server (answer one, fan the answer out), keep the hot \
             prefix warm (send it once before its traffic, or pin it), stagger retries and \
             scheduled jobs that fire together"
        }
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

fn kv_cache(engine: ServerKind) -> Vec<Clause> {
    use Resource::DeviceMemory as Mem;
    match engine {
        ServerKind::Vllm => vec![
            room("raise gpu_memory_utilization", Mem),
            always("lower max_num_seqs / max_model_len"),
            always("enable prefix caching"),
            always("add replicas"),
        ],
        ServerKind::Sglang => vec![
            room("raise --mem-fraction-static", Mem),
            always("lower --max-running-requests / --context-length"),
            always("keep the radix cache on (no --disable-radix-cache)"),
            always("add replicas"),
        ],
        ServerKind::Tgi => vec![
            always("lower --max-batch-size or --max-total-tokens"),
            room(
                "give the cache more of the GPU (--cuda-memory-fraction) so \
                 --max-batch-total-tokens can grow",
                Mem,
            ),
            always("add replicas"),
        ],
        ServerKind::LlamaCpp => vec![
            room(
                "raise --ctx-size (its slots share it: each gets ctx-size / --parallel)",
                Mem,
            ),
            always("lower --parallel"),
            always("quantise the cache (--cache-type-k / --cache-type-v q8_0)"),
            always("add replicas"),
        ],
        ServerKind::Unknown => vec![
            room("give the server more memory for its KV cache", Mem),
            always("cap its concurrent sequences or context length"),
            always("enable prefix caching"),
            always("add replicas"),
        ],
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

/// Searches waiting inside a vector service: no engine's admission, slots or KV cache (those
/// hold generation requests); its search threads, and the index writes they wait behind.
pub const VECTOR_QUEUE: &str = "searches wait inside the service: add replicas or search threads; an index being written under them (an ingest, a rebuild) holds them back where the service locks it: ingest off-peak or on a replica";

fn queue_lead(engine: ServerKind) -> &'static str {
    match engine {
        ServerKind::LlamaCpp => "requests wait for a free slot",
        _ => "requests wait for admission",
    }
}

/// Admitting more sequences needs room in the KV cache for them; a higher slot cap answers
/// slots that are all taken, a larger prompt budget per step answers waiting with both free.
fn queue(engine: ServerKind) -> Vec<Clause> {
    use Resource::{KvCache as Kv, Slots};
    let (slots, budget) = match engine {
        ServerKind::Vllm => (
            "raise max_num_seqs",
            Some("raise max_num_batched_tokens (prompt tokens admitted per step)"),
        ),
        ServerKind::Sglang => (
            "raise --max-running-requests",
            Some("raise --chunked-prefill-size (prompt tokens admitted per step)"),
        ),
        ServerKind::Tgi => (
            "raise --max-batch-size",
            Some("raise --max-batch-prefill-tokens (prompt tokens admitted per step)"),
        ),
        ServerKind::LlamaCpp => (
            "raise --parallel (and --ctx-size with it: each slot gets ctx-size / --parallel)",
            None,
        ),
        ServerKind::Unknown => ("raise the server's cap on concurrent requests", None),
    };
    let mut out = vec![
        always("add replicas"),
        Clause {
            text: slots,
            needs_room: Some(Kv),
            answers: Some(Slots),
        },
    ];
    out.extend(budget.map(|text| room(text, Kv)));
    out
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
                .map(|&c| hint(c, engine, &Headroom::default()))
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
        assert!(
            hint(Cause::KvCache, ServerKind::LlamaCpp, &Headroom::default()).contains("--ctx-size")
        );
        assert!(
            hint(Cause::Queue, ServerKind::LlamaCpp, &Headroom::default()).contains("--parallel")
        );
        assert!(
            hint(
                Cause::CpuRunqueue,
                ServerKind::LlamaCpp,
                &Headroom::default()
            )
            .contains("-t / --threads")
        );
        assert!(
            hint(Cause::KvCache, ServerKind::Vllm, &Headroom::default())
                .contains("gpu_memory_utilization")
        );
        assert!(
            hint(Cause::Loadgen, ServerKind::Unknown, &Headroom::default()).contains("--shard")
        );
    }

    /// The knob causes differ per engine; the others say the same whatever the engine.
    #[test]
    fn only_engine_knobs_change_with_the_engine() {
        for c in Cause::ALL {
            let neutral = hint(c, ServerKind::Unknown, &Headroom::default());
            let differs = [ServerKind::Vllm, ServerKind::Sglang, ServerKind::Tgi]
                .into_iter()
                .any(|e| hint(c, e, &Headroom::default()) != neutral);
            assert_eq!(differs, KNOBS.contains(&c), "{c}");
        }
    }

    /// Every cause's advice on every engine, walked against each resource full: no clause that
    /// needs room in a full resource is given, and a resource measured with room needs no
    /// "if" (the H200's `queue` advice said "raise `max_num_seqs` if KV usage allows" beside a
    /// KV usage of 0.98).
    #[test]
    fn advice_never_raises_a_limit_the_evidence_shows_full() {
        let engines = [
            ServerKind::Vllm,
            ServerKind::Sglang,
            ServerKind::Tgi,
            ServerKind::LlamaCpp,
            ServerKind::Unknown,
        ];
        let all = [Resource::Slots, Resource::KvCache, Resource::DeviceMemory];
        for engine in engines {
            for full in all {
                let room = Headroom {
                    full: vec![full],
                    measured: all.to_vec(),
                };
                for cause in Cause::ALL {
                    let text = hint(cause, engine, &room);
                    let clauses = match cause {
                        Cause::KvCache => kv_cache(engine),
                        Cause::Queue => queue(engine),
                        _ => Vec::new(),
                    };
                    for c in clauses {
                        let given =
                            c.needs_room != Some(full) && c.answers.is_none_or(|a| a == full);
                        assert_eq!(
                            text.contains(c.text),
                            given,
                            "{cause} on {engine:?} with the {} full: {text}",
                            full.name()
                        );
                    }
                    assert!(!text.contains(" if the "), "{text}");
                    assert!(
                        !text.ends_with(": "),
                        "{cause} {engine:?}: nothing left: {text}"
                    );
                }
            }
        }
        let kv_full = Headroom {
            full: vec![Resource::KvCache],
            measured: all.to_vec(),
        };
        let q = hint(Cause::Queue, ServerKind::Vllm, &kv_full);
        assert!(
            !q.contains("max_num_seqs") && !q.contains("max_num_batched_tokens"),
            "{q}"
        );
        // Not measured: each clause is given with its condition.
        let q = hint(Cause::Queue, ServerKind::Vllm, &Headroom::default());
        assert!(
            q.contains(
                "raise max_num_seqs when the admission slots are all taken if the KV cache has room"
            ),
            "{q}"
        );
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

//! The root integration tests: one binary, each file a module. They need root (eBPF) and share
//! the machine's CPUs, so each takes the machine for itself (`root_or_skip`).
mod chroma_e2e;
mod compute_e2e;
mod confirm_e2e;
mod cuda_uprobes;
mod daemon_hops;
mod daemon_metrics;
mod daemon_servers;
mod daemon_sim;
mod daemon_verdicts;
mod explain_e2e;
mod guardrail;
mod kernel_first_e2e;
mod knee_search;
mod llamacpp_e2e;
mod llamacpp_sessions;
mod loadgen_pipeline;
mod pipeline_e2e;
mod ringbuf_flood;
mod runqlat;
mod sockets;
mod stampede_e2e;
mod triggers_e2e;

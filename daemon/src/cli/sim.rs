//! `inferscope sim`: the embedded simulated inference server (`OpenAI` API, `vLLM` metrics).

use std::{net::SocketAddr, path::PathBuf, process::ExitCode};

use anyhow::Context as _;
use inferscope::sim::{self, SimConfig};

/// Arguments of `inferscope sim`. Flags override the profile, which overrides the file.
#[derive(clap::Args)]
pub struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8000")]
    listen: SocketAddr,
    /// TOML configuration file (see `inferscope::sim::config::SimConfig`).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Named profile: healthy, kv-pressure, queue-bound, gpu-memory, slow-index, fixed.
    #[arg(long)]
    profile: Option<String>,
    /// Model name to serve.
    #[arg(long)]
    model: Option<String>,
    /// KV-cache blocks of 16 tokens.
    #[arg(long)]
    num_gpu_blocks: Option<usize>,
    /// Most sequences running at once.
    #[arg(long)]
    max_num_seqs: Option<usize>,
    /// Most tokens per engine step.
    #[arg(long)]
    max_num_batched_tokens: Option<usize>,
    /// Requests waiting beyond this get 503.
    #[arg(long)]
    max_waiting: Option<usize>,
    /// Simulated device memory in bytes.
    #[arg(long)]
    device_memory: Option<u64>,
    /// Fraction of requests answered with an injected 500.
    #[arg(long)]
    error_rate: Option<f64>,
    /// Latency spike: every this many ms ...
    #[arg(long)]
    spike_every_ms: Option<u64>,
    /// ... lasting this many ms ...
    #[arg(long)]
    spike_duration_ms: Option<u64>,
    /// ... delaying requests by this many ms.
    #[arg(long)]
    spike_delay_ms: Option<u64>,
    /// Fixed mode: exact time to first token (ms); needs --itl-ms.
    #[arg(long, requires = "itl_ms")]
    ttft_ms: Option<f64>,
    /// Fixed mode: exact inter-token latency (ms).
    #[arg(long, requires = "ttft_ms")]
    itl_ms: Option<f64>,
    /// Use a cost model of zero (measures the simulator's own overhead).
    #[arg(long)]
    zero_cost: bool,
    /// Vectors in the synthetic corpus.
    #[arg(long)]
    corpus_size: Option<usize>,
    /// Latency spike of vector queries during an index rebuild (ms).
    #[arg(long)]
    rebuild_spike_ms: Option<u64>,
    /// Share (0..=1) of chat requests offering tools that are answered with a tool call.
    #[arg(long)]
    tool_call_rate: Option<f64>,
    /// Re-rank requests computed at once; the others wait their turn.
    #[arg(long)]
    rerank_concurrency: Option<usize>,
    /// The re-ranker runs on CPUs: its compute time is CPU time in a thread of the sim (a CPU
    /// quota stretches it), not a wait.
    #[arg(long)]
    rerank_on_cpu: bool,
    /// Serve HTTPS with this certificate chain (PEM, leaf first); needs --tls-key.
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
}

fn set<T>(dst: &mut T, v: Option<T>) {
    if let Some(v) = v {
        *dst = v;
    }
}

fn config(a: &Args) -> anyhow::Result<SimConfig> {
    let mut c = match (&a.config, &a.profile) {
        (Some(path), None) => SimConfig::from_file(path)?,
        (None, Some(p)) => sim::profile(p)?,
        (None, None) => SimConfig::default(),
        (Some(_), Some(_)) => anyhow::bail!("give --config or --profile, not both"),
    };
    set(&mut c.model, a.model.clone());
    set(&mut c.engine.num_gpu_blocks, a.num_gpu_blocks);
    set(&mut c.engine.max_num_seqs, a.max_num_seqs);
    set(
        &mut c.engine.max_num_batched_tokens,
        a.max_num_batched_tokens,
    );
    set(&mut c.engine.max_waiting, a.max_waiting);
    set(&mut c.device.memory_bytes, a.device_memory);
    set(&mut c.faults.error_rate, a.error_rate);
    set(&mut c.faults.spike_every_ms, a.spike_every_ms);
    set(&mut c.faults.spike_duration_ms, a.spike_duration_ms);
    set(&mut c.faults.spike_delay_ms, a.spike_delay_ms);
    set(&mut c.vector.corpus_size, a.corpus_size);
    set(&mut c.vector.rebuild_spike_ms, a.rebuild_spike_ms);
    set(&mut c.tools.call_rate, a.tool_call_rate);
    set(&mut c.rerank.concurrency, a.rerank_concurrency);
    c.rerank.on_cpu |= a.rerank_on_cpu;
    if let (Some(ttft_ms), Some(itl_ms)) = (a.ttft_ms, a.itl_ms) {
        c.fixed = Some(sim::config::FixedTiming { ttft_ms, itl_ms });
    }
    if a.zero_cost {
        c.cost = sim::config::CostModel::zero();
    }
    c.validate()?;
    Ok(c)
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let cfg = config(args)?;
    // A bad certificate or key stops here, before the port is taken.
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(inferscope::tls::server::server_config(cert, key)?),
        _ => None,
    };
    let rt = tokio::runtime::Runtime::new().context("starting the tokio runtime")?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        let srv = match tls {
            Some(tls) => sim::start_tls(cfg.clone(), listener, tls).await?,
            None => sim::start(cfg.clone(), listener).await?,
        };
        eprintln!(
            "inferscope sim: serving model {:?} on {} ({} KV blocks, max_num_seqs {}, device {} MiB{}); this is a simulation, no GPU is used",
            cfg.model,
            srv.url(),
            cfg.engine.num_gpu_blocks,
            cfg.engine.max_num_seqs,
            cfg.device_memory_bytes() >> 20,
            if cfg.fixed.is_some() { ", fixed timing" } else { "" },
        );
        tokio::signal::ctrl_c().await.context("waiting for Ctrl-C")?;
        srv.shutdown().await?;
        Ok(ExitCode::SUCCESS)
    })
}

//! `inferscope daemon`: the node-level mode. Finds the inference servers, attaches every
//! probe, keeps the time line, and serves it until SIGTERM.

use std::{net::SocketAddr, path::PathBuf, process::ExitCode, sync::Arc, time::Duration};

use anyhow::{Context as _, bail};
use inferscope::{
    collect::{
        discover,
        kernel::{KernelCollector, KernelOptions, Losses},
        procfs::{self, ProcessInfo},
        server::{NvmlCollector, ServerCollector},
        timeline::{Timeline, now_unix_ms},
    },
    probes::{HookStatus, cuda, privileges},
};
use serde::Serialize;
use tokio::sync::watch;

/// Arguments of `inferscope daemon`.
#[derive(clap::Args)]
pub struct Args {
    /// Watch the processes listening on this TCP port (repeatable).
    #[arg(long = "port", value_name = "PORT")]
    ports: Vec<u16>,
    /// Watch this process (repeatable).
    #[arg(long = "pid", value_name = "PID")]
    pids: Vec<u32>,
    /// Watch processes whose name or command line contains this (repeatable).
    #[arg(long = "name", value_name = "NAME")]
    names: Vec<String>,
    /// The server's Prometheus endpoint (default: `http://127.0.0.1:<port>/metrics` of the
    /// first --port).
    #[arg(long, value_name = "URL")]
    metrics_url: Option<String>,
    /// Hook the CUDA driver API in this library or binary too (repeatable).
    #[arg(long = "cuda-lib", value_name = "PATH")]
    cuda_libs: Vec<PathBuf>,
    /// Serve `/metrics` and `/api/v1/timeline` here.
    #[arg(long, default_value = "127.0.0.1:9464")]
    listen: SocketAddr,
    /// Window length of the time line.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    interval: Duration,
    /// Windows kept in memory.
    #[arg(long, default_value_t = 3600)]
    keep: usize,
    /// Exit after this long (default: until SIGTERM / Ctrl-C).
    #[arg(long, value_parser = humantime::parse_duration)]
    duration: Option<Duration>,
}

/// What the daemon publishes after every window.
#[derive(Serialize, Default)]
pub struct Snapshot {
    /// The watched processes.
    pub processes: Vec<ProcessInfo>,
    /// Every hook and whether it is attached.
    pub hooks: Vec<HookStatus>,
    /// What could not be recorded, kernel and userspace.
    pub losses: Losses,
    /// The time line, oldest window first.
    pub timeline: Option<Timeline>,
}

fn targets(args: &Args) -> Vec<u32> {
    let mut pids = args.pids.clone();
    for &p in &args.ports {
        pids.extend(discover::pids_listening_on(p));
    }
    for n in &args.names {
        pids.extend(discover::pids_named(n));
    }
    if args.ports.is_empty() && args.pids.is_empty() && args.names.is_empty() {
        pids.extend(discover::pids_with_libcuda());
    }
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// Says which capabilities are present and which hooks each missing one disables.
fn report_capabilities() {
    let caps = privileges::effective_caps();
    for (cap, name, disables) in [
        (
            privileges::CAP_BPF,
            "CAP_BPF",
            "every probe (loading programs and maps)",
        ),
        (
            privileges::CAP_PERFMON,
            "CAP_PERFMON",
            "tracepoint probes (scheduler, sockets, XID)",
        ),
        (
            privileges::CAP_SYS_ADMIN,
            "CAP_SYS_ADMIN",
            "CUDA uprobes on this kernel; also stands in for CAP_BPF+CAP_PERFMON",
        ),
    ] {
        let has = caps & (1 << cap) != 0;
        println!(
            "capability {name}: {}",
            if has {
                "yes".to_string()
            } else {
                format!("missing, disables {disables}")
            }
        );
    }
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Runtime::new().context("starting the tokio runtime")?;
    rt.block_on(serve(args))
}

async fn serve(args: &Args) -> anyhow::Result<ExitCode> {
    report_capabilities();
    let servers = targets(args);
    if servers.is_empty() {
        bail!("no inference server found: give --pid, --port or --name (or run a CUDA workload)");
    }
    let processes: Vec<ProcessInfo> = servers.iter().map(|&p| procfs::identity(p)).collect();
    for p in &processes {
        println!(
            "watching pid {} ({}) {}",
            p.pid,
            p.comm,
            p.container_id.as_deref().unwrap_or("")
        );
    }
    // A server binary that exports the driver API itself (the simulated device, static builds).
    let mut cuda_targets = args.cuda_libs.clone();
    cuda_targets.extend(
        servers
            .iter()
            .map(|p| PathBuf::from(format!("/proc/{p}/exe")))
            .filter(|e| cuda::exports(e, "cuMemAlloc_v2")),
    );
    let mut kernel = KernelCollector::start(KernelOptions {
        servers: servers.clone(),
        loadgen: None,
        cuda_targets,
        discover_libcuda: true,
    })?;
    for h in kernel.hooks() {
        match &h.reason {
            None => println!("probe {}: attached", h.probe),
            Some(r) => println!("probe {}: not attached: {r}", h.probe),
        }
    }
    let metrics_url = args.metrics_url.clone().or_else(|| {
        args.ports
            .first()
            .map(|p| format!("http://127.0.0.1:{p}/metrics"))
    });
    let mut scraper = match &metrics_url {
        Some(url) => {
            println!("scraping {url}");
            Some(ServerCollector::start(
                url,
                args.interval.min(Duration::from_secs(1)),
            )?)
        }
        None => {
            println!("server metrics: off (give --metrics-url or --port)");
            None
        }
    };
    let mut nvml = NvmlCollector::start(args.interval);
    println!("GPU (NVML): {}", nvml.status());
    let (tx, rx) = watch::channel(Arc::new(Snapshot::default()));
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    println!("serving http://{}/api/v1/timeline", listener.local_addr()?);
    let app = axum::Router::new().route(
        "/api/v1/timeline",
        axum::routing::get(move || {
            let rx = rx.clone();
            async move {
                let snap = Arc::clone(&rx.borrow());
                let body = serde_json::to_string(&*snap)
                    .unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
                (
                    [(axum::http::header::CONTENT_TYPE, "application/json")],
                    body,
                )
            }
        }),
    );
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let len = args.interval;
    let mut timeline = Timeline::new(now_unix_ms(), len.as_millis() as u64);
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + len, len);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let deadline = args.duration.map(|d| tokio::time::Instant::now() + d);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = term.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
        }
        let w = timeline.at(now_unix_ms().saturating_sub(1));
        kernel.close_window(w)?;
        if let Some(s) = scraper.as_mut() {
            s.close_window(w);
        }
        nvml.close_window(w);
        timeline.retain_last(args.keep);
        kernel.prune()?;
        let snap = Snapshot {
            processes: processes.clone(),
            hooks: kernel.hooks().to_vec(),
            losses: kernel.losses()?,
            timeline: Some(timeline.clone()),
        };
        tx.send_replace(Arc::new(snap));
        if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
            break;
        }
    }
    server.abort();
    // Dropping the collector detaches every link; nothing is pinned, so nothing is left behind.
    drop(kernel);
    println!("inferscope daemon: stopped");
    Ok(ExitCode::SUCCESS)
}

//! `inferscope daemon`: the node-level mode. Finds the inference servers (and keeps looking),
//! attaches every probe, keeps the time line, serves `/metrics` and `/api/v1/timeline`, exports
//! over OTLP when asked, and exits cleanly on SIGTERM.

use std::{net::SocketAddr, path::PathBuf, process::ExitCode, sync::Arc, time::Duration};

use anyhow::Context as _;
use inferscope::{
    api::{
        Api, ApiConfig, Bind, LoadgenLauncher, Marks, Token, check_distinct,
        node::{self, NodeSnapshot},
        redact, require_token, serve,
    },
    collect::{
        discover,
        kernel::{KernelCollector, KernelOptions},
        procfs,
        server::{NvmlCollector, ServerCollector},
        timeline::{Timeline, now_unix_ms},
    },
    export::{
        prometheus::{self, DropCounter},
        signals::{Labels, Totals},
    },
    probes::privileges,
};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::otlp::OtlpArgs;

/// Re-discover servers every this many windows.
const REDISCOVER_EVERY: u64 = 10;

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
    #[arg(long, alias = "listen", default_value = "127.0.0.1:9464")]
    metrics_listen: SocketAddr,
    /// Require this bearer token (file) on `/metrics` and `/api/v1/timeline`; needed for any
    /// address other than loopback.
    #[arg(long, value_name = "PATH")]
    metrics_token_file: Option<PathBuf>,
    /// Window length of the time line.
    #[arg(long, default_value = "1s", value_parser = super::args::positive_duration)]
    interval: Duration,
    /// Windows kept in memory.
    #[arg(long, default_value_t = 3600)]
    keep: usize,
    /// Exit after this long (default: until SIGTERM / Ctrl-C).
    #[arg(long, value_parser = super::args::positive_duration)]
    duration: Option<Duration>,
    /// Serve the control API (`/api/v1/runs`, `/api/v1/marks`) here: HOST:PORT or unix:PATH.
    #[arg(long, default_value = "127.0.0.1:7070", value_name = "ADDR")]
    api_listen: Bind,
    /// Require this bearer token (file) on the control API; needed for any address other
    /// than loopback or a unix socket.
    #[arg(long, value_name = "PATH")]
    api_token_file: Option<PathBuf>,
    /// Let runs started over the control API load targets outside loopback.
    #[arg(long)]
    allow_remote: bool,
    /// Runs posted to the control API read dataset and trace files only from below this
    /// folder (without it: inline `prompts:` and synthetic datasets only).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Show watched processes' full command lines in /api/v1/timeline (they may hold API
    /// keys; by default only the program is shown).
    #[arg(long)]
    show_cmdlines: bool,
    #[command(flatten)]
    otlp: OtlpArgs,
}

impl Args {
    /// The servers to watch now. Without --pid/--port/--name: every process mapping libcuda.
    fn targets(&self) -> Vec<u32> {
        let mut pids = self.pids.clone();
        for &p in &self.ports {
            pids.extend(discover::pids_listening_on(p));
        }
        for n in &self.names {
            pids.extend(discover::pids_named(n));
        }
        if self.ports.is_empty() && self.pids.is_empty() && self.names.is_empty() {
            pids.extend(discover::pids_with_libcuda());
        }
        pids.retain(|&p| procfs::alive(p));
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    fn kernel_options(&self, servers: Vec<u32>) -> KernelOptions {
        KernelOptions {
            servers,
            loadgen: None,
            cuda_targets: self.cuda_libs.clone(),
            discover_libcuda: true,
        }
    }
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
            "CUDA uprobes on this kernel",
        ),
    ] {
        let has = caps & (1 << cap) != 0;
        println!(
            "capability {name}: {}",
            if has {
                "yes".to_string()
            } else {
                format!("missing: disables {disables}")
            }
        );
    }
}

/// Binds the control API with the embedded load generator behind it and serves it until
/// `stop` is cancelled.
async fn start_api(
    args: &Args,
    marks: Marks,
    stop: CancellationToken,
) -> anyhow::Result<tokio::task::JoinHandle<Result<(), inferscope::api::ApiError>>> {
    let config = ApiConfig {
        bind: args.api_listen.clone(),
        token_file: args.api_token_file.clone(),
        ..ApiConfig::default()
    };
    let launcher = Arc::new(LoadgenLauncher::new(
        args.allow_remote,
        args.data_dir.clone(),
    ));
    let api = Api::bind(&config, launcher, marks).await?;
    match api.local_addr() {
        Some(a) => println!("control API on http://{a}/api/v1/ (runs, marks)"),
        None => println!("control API on {:?}", args.api_listen),
    }
    Ok(tokio::spawn(api.serve(stop.cancelled_owned())))
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Runtime::new().context("starting the tokio runtime")?;
    rt.block_on(serve(args))
}

// One sequential story: set up every collector, then the window loop, then shut down.
#[allow(clippy::too_many_lines)]
async fn serve(args: &Args) -> anyhow::Result<ExitCode> {
    report_capabilities();
    if !args.metrics_listen.ip().is_loopback() && args.metrics_token_file.is_none() {
        anyhow::bail!(
            "--metrics-listen {} is not loopback: give --metrics-token-file with a bearer token",
            args.metrics_listen
        );
    }
    check_distinct(
        args.metrics_token_file.as_deref(),
        args.api_token_file.as_deref(),
    )?;
    // Bound first: a refused bind (no token) fails before any probe is attached.
    let marks = Marks::default();
    let api_stop = CancellationToken::new();
    let api_task = start_api(args, marks.clone(), api_stop.clone()).await?;

    let mut servers = args.targets();
    if servers.is_empty() {
        println!("no inference server found yet; looking again every {REDISCOVER_EVERY} windows");
    }
    let mut kernel = KernelCollector::start(args.kernel_options(servers.clone()))?;
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
    let mut scraper = if let Some(url) = &metrics_url {
        println!("scraping {url}");
        Some(ServerCollector::start(
            url,
            args.interval.min(Duration::from_secs(1)),
        )?)
    } else {
        println!("server metrics: off (give --metrics-url or --port)");
        None
    };
    let mut nvml = NvmlCollector::start(args.interval);
    println!("GPU (NVML): {}", nvml.status());
    let otlp = args.otlp.start()?;

    let (tx, rx) = watch::channel(Arc::new(NodeSnapshot::default()));
    let mut app = node::routes(rx);
    if let Some(path) = &args.metrics_token_file {
        app = app.layer(axum::middleware::from_fn_with_state(
            Token::from_file(path)?,
            require_token,
        ));
    }
    let listener = tokio::net::TcpListener::bind(args.metrics_listen)
        .await
        .with_context(|| format!("binding --metrics-listen {}", args.metrics_listen))?;
    println!(
        "serving http://{}/metrics and /api/v1/timeline",
        listener.local_addr()?
    );
    // Header and request deadlines and a connection cap (api::serve).
    let http = tokio::spawn(serve::serve(
        listener,
        app,
        serve::Limits::default(),
        std::future::pending(),
    ));

    let len = args.interval;
    let mut timeline = Timeline::new(now_unix_ms(), len.as_millis() as u64);
    let mut totals = Totals::default();
    let labels = Labels::default();
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + len, len);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let deadline = args.duration.map(|d| tokio::time::Instant::now() + d);
    // Windows up to this start already carry their phase from the marks.
    let mut phased_until = 0;
    for n in 1u64.. {
        tokio::select! {
            _ = tick.tick() => {}
            _ = term.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
        }
        if n % REDISCOVER_EVERY == 0 {
            let now = args.targets();
            if now != servers {
                println!("watching {now:?} (was {servers:?})");
                kernel.watch(args.kernel_options(now.clone()))?;
                servers = now;
            }
        }
        let closing = now_unix_ms().saturating_sub(1);
        timeline.at(closing);
        // Phases marked by an external load generator (k6, guidellm) over the API, for this
        // window and any a late tick skipped over (`at` created those empty).
        for w in timeline.windows.iter_mut().rev() {
            if w.start_unix_ms <= phased_until {
                break;
            }
            if w.phase.is_none() {
                w.phase = marks.phase_at(w.start_unix_ms);
            }
        }
        let w = timeline.at(closing);
        phased_until = w.start_unix_ms;
        kernel.close_window(w)?;
        if let Some(s) = scraper.as_mut() {
            s.close_window(w);
        }
        nvml.close_window(w);
        totals.add(w);
        if let Some(x) = &otlp {
            x.record_window(w, &labels);
        }
        timeline.retain_last(args.keep);
        kernel.prune()?;
        let losses = kernel.losses()?;
        let mut drops = vec![
            DropCounter {
                stage: "kernel".into(),
                what: "runqlat".into(),
                count: losses.runq,
            },
            DropCounter {
                stage: "kernel".into(),
                what: "sockets".into(),
                count: losses.sockets,
            },
            DropCounter {
                stage: "kernel".into(),
                what: "cuda".into(),
                count: losses.cuda,
            },
            DropCounter {
                stage: "channel".into(),
                what: "events".into(),
                count: losses.channels,
            },
        ];
        if let Some(x) = &otlp {
            drops.extend(x.stats().drop_counters());
        }
        let hooks = kernel.hooks().to_vec();
        let metrics_text = prometheus::render(&prometheus::Snapshot {
            latest: timeline.windows.last(),
            totals: &totals,
            labels: &labels,
            probes: &hooks,
            drops: &drops,
        });
        tx.send_replace(Arc::new(NodeSnapshot {
            processes: servers
                .iter()
                .map(|&p| redact::process(procfs::identity(p), args.show_cmdlines))
                .collect(),
            hooks,
            losses,
            scrape_error: scraper.as_ref().and_then(|s| s.last_error.clone()),
            timeline: Some(timeline.clone()),
            metrics_text,
        }));
        if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
            break;
        }
    }
    http.abort();
    api_stop.cancel();
    match tokio::time::timeout(Duration::from_secs(5), api_task).await {
        Ok(Ok(Err(e))) => eprintln!("inferscope: {e}"),
        Ok(_) => {}
        Err(_) => eprintln!("inferscope: control API did not stop within 5s; leaving it"),
    }
    if let Some(x) = otlp {
        let stats = tokio::task::spawn_blocking(move || x.shutdown()).await??;
        println!("OTLP: {stats:?}");
    }
    // Dropping the collector detaches every link; nothing is pinned, so nothing is left behind.
    drop(kernel);
    println!("inferscope daemon: stopped");
    Ok(ExitCode::SUCCESS)
}

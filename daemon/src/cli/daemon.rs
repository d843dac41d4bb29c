//! `inferscope daemon`: the node-level mode. Finds the inference servers (and keeps looking),
//! attaches every probe, keeps one time line and verdict per server (a pod, a container, a
//! listening process), names pods from the node's pod list when it can be read, serves
//! `/metrics` and `/api/v1/timeline`, exports over OTLP when asked, and exits cleanly on
//! SIGTERM.

use std::{
    net::SocketAddr,
    path::PathBuf,
    process::ExitCode,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use anyhow::Context as _;
use inferscope::{
    api::{
        Api, ApiConfig, Bind, LoadgenLauncher, MarkingLauncher, Marks, Token, check_distinct, node,
        require_token, serve,
    },
    collect::{
        catalog::Labels,
        discover,
        pods::{PodIndex, PodSource},
        procfs,
        session::SessionOptions,
    },
    export::otlp::{OtlpExporter, Sampler, live::DEFAULT_SAMPLE},
    node::{Grouping, Node, NodeOptions},
    probes::privileges,
};
use tokio_util::sync::CancellationToken;

use super::otlp::OtlpArgs;

/// Re-discover servers every this many windows.
const REDISCOVER_EVERY: u64 = 10;

/// How often the pod list is read again.
const PODS_EVERY: Duration = Duration::from_secs(30);

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
    /// A server's Prometheus endpoint, scraped for the server listening on its port (or the
    /// only server). Every other server's is found on its own listening addresses.
    #[arg(long, value_name = "URL")]
    metrics_url: Option<String>,
    /// Read pod names from this pod list (the kubelet's `https://NODE:10250/pods`, or the API
    /// server's pods of this node) with the service account's token when there is one;
    /// default in a pod: the API server, this node's pods (`NODE_NAME`). Without it pods are
    /// named by their UIDs.
    #[arg(long, value_name = "URL")]
    pods_url: Option<String>,
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
    /// Windows kept in memory per server (several servers share 14,400 windows, or this if
    /// more).
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
    /// TLS for an https:// --metrics-url and for the targets of runs posted to the control API.
    #[command(flatten)]
    tls: super::tls::TlsArgs,
    /// Show watched processes' full command lines in /api/v1/timeline (they may hold API
    /// keys; by default only the program is shown).
    #[arg(long)]
    show_cmdlines: bool,
    /// Trigger rules (YAML `triggers:`; see deploy/README.md, "Triggers") judged on every
    /// window; their webhooks go to loopback only unless --allow-remote.
    #[arg(long, value_name = "FILE")]
    triggers: Option<PathBuf>,
    #[command(flatten)]
    otlp: OtlpArgs,
}

impl Args {
    /// The servers to watch now, by the flags given.
    fn finder(&self) -> Finder {
        Finder {
            ports: self.ports.clone(),
            pids: self.pids.clone(),
            names: self.names.clone(),
        }
    }
}

/// Finds the servers: given pids, listeners on the ports (in any network namespace), names.
#[derive(Clone)]
struct Finder {
    ports: Vec<u16>,
    pids: Vec<u32>,
    names: Vec<String>,
}

impl Finder {
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
        tracing::info!(
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
    tls: inferscope::tls::TlsOptions,
    marks: Marks,
    stop: CancellationToken,
    otlp: Option<&Arc<OtlpExporter>>,
) -> anyhow::Result<tokio::task::JoinHandle<Result<(), inferscope::api::ApiError>>> {
    let config = ApiConfig {
        bind: args.api_listen.clone(),
        token_file: args.api_token_file.clone(),
        ..ApiConfig::default()
    };
    // Posted scenarios read dataset and trace files only below --data-dir; their phases are
    // marked on the time line.
    let mut loadgen = LoadgenLauncher::new(args.allow_remote, args.data_dir.clone()).with_tls(tls);
    if let Some(x) = otlp {
        // Posted runs' requests go out live too; spans as OTEL_TRACES_SAMPLER says, else 1%.
        let env = |k: &str| std::env::var(k).ok();
        let sampler = match Sampler::from_env(&env)? {
            Some(s) => s,
            None => Sampler::new(DEFAULT_SAMPLE)?,
        };
        loadgen = loadgen.with_otlp(Arc::clone(x), sampler);
    }
    let launcher = Arc::new(MarkingLauncher::new(Arc::new(loadgen), marks.clone()));
    let api = Api::bind(&config, launcher, marks).await?;
    let at = api.local_addr().map_or_else(
        || args.api_listen.to_string(),
        |a| format!("http://{a}/api/v1/"),
    );
    tracing::info!("control API on {at} (runs, marks)");
    Ok(tokio::spawn(api.serve(stop.cancelled_owned())))
}

/// Runs the daemon until SIGTERM, Ctrl-C or `--duration`.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Runtime::new().context("starting the tokio runtime")?;
    rt.block_on(async {
        let duration = args.duration;
        serve(args, async move {
            let mut term =
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    Ok(t) => t,
                    Err(e) => {
                        tracing::error!("cannot watch SIGTERM ({e}); stop with Ctrl-C");
                        return std::future::pending().await;
                    }
                };
            let deadline = async {
                match duration {
                    Some(d) => tokio::time::sleep(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
                () = deadline => {}
            }
        })
        .await
    })
}

/// The daemon: the control API, the collection pipeline, `/metrics` and the read routes, until
/// `shutdown` completes; then every server drains gracefully and the probes detach.
pub async fn serve(
    args: &Args,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> anyhow::Result<ExitCode> {
    report_capabilities();
    // A bad --ca-file stops the daemon here, before anything is bound or attached.
    let tls = args.tls.options()?;
    if args.tls.insecure() {
        tracing::warn!("{}", super::tls::INSECURE_WARNING);
    }
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
    let metrics_token = args
        .metrics_token_file
        .as_deref()
        .map(Token::from_file)
        .transpose()?;
    // Bound first: a refused bind (no token) fails before any probe is attached.
    let marks = Marks::default();
    let stop = CancellationToken::new();
    let otlp = args.otlp.start(&[])?.map(Arc::new);
    let api_task = start_api(
        args,
        tls.clone(),
        marks.clone(),
        stop.clone(),
        otlp.as_ref(),
    )
    .await?;
    let listener = tokio::net::TcpListener::bind(args.metrics_listen)
        .await
        .with_context(|| format!("binding --metrics-listen {}", args.metrics_listen))?;

    let mut opts = node_options(args, tls, marks, otlp.as_ref());
    let triggers = args
        .triggers
        .as_deref()
        .map(|f| super::triggers::start_for_daemon(f, args.allow_remote, otlp.as_ref(), &mut opts))
        .transpose()?;
    let (node, handle) = Node::start(opts);
    if !node.session().has_kernel() {
        anyhow::bail!(
            "{}",
            node.missing()
                .first()
                .map_or("the kernel probes did not start", String::as_str)
        );
    }
    for h in node.session().hooks() {
        match h.reason() {
            None => tracing::info!("probe {}: attached", h.probe),
            Some(r) => tracing::warn!("probe {}: not attached: {r}", h.probe),
        }
    }
    tracing::info!("GPU (NVML): {}", node.session().gpu_status());

    let otlp_drops: Option<node::ExtraDrops> = otlp.as_ref().map(|x| {
        let x = Arc::clone(x);
        Arc::new(move || x.stats().drop_counters()) as node::ExtraDrops
    });
    let trigger_metrics: Option<node::ExtraMetrics> = triggers.as_ref().map(|(_, counts)| {
        let c = Arc::clone(counts);
        Arc::new(move || inferscope::export::prometheus::trigger_counts(&c.get(), c.dropped()))
            as node::ExtraMetrics
    });
    let mut app = node::routes_with(handle, otlp_drops, trigger_metrics, args.show_cmdlines);
    if let Some(token) = metrics_token {
        app = app.layer(axum::middleware::from_fn_with_state(token, require_token));
    }
    tracing::info!(
        "serving http://{}/metrics and /api/v1/ (timeline, verdicts, report, report.html)",
        listener.local_addr()?
    );
    // Header and request deadlines and a connection cap (api::serve).
    let http = tokio::spawn(serve::serve(
        listener,
        app,
        serve::Limits::default(),
        stop.clone().cancelled_owned(),
    ));

    let finished = node.run(shutdown).await;
    if let Some((runner, _)) = triggers {
        let fired = super::triggers::finish(runner).await?;
        tracing::info!("triggers: {} firing(s) this run", fired.len());
    }
    stop.cancel();
    join_servers(http, api_task).await;
    finish_otlp(otlp).await?;
    // The collectors stopped with the node: every link is detached, nothing was pinned.
    tracing::info!(
        "inferscope daemon: stopped; {} server(s) had a time line",
        finished.servers
    );
    Ok(ExitCode::SUCCESS)
}

/// Shuts the OTLP export down and logs what it delivered.
async fn finish_otlp(otlp: Option<Arc<OtlpExporter>>) -> anyhow::Result<()> {
    if let Some(x) = otlp {
        match Arc::try_unwrap(x) {
            Ok(x) => {
                let stats = tokio::task::spawn_blocking(move || x.shutdown()).await??;
                tracing::info!(
                    "OTLP: {} spans delivered, {} dropped; {} metric pushes delivered, {} failed",
                    stats.spans_exported,
                    stats.spans_dropped(),
                    stats.metric_exports_ok,
                    stats.metric_exports_failed
                );
            }
            // A posted run still going holds the exporter: push what there is.
            Err(shared) => {
                tracing::warn!(
                    "OTLP: a posted run is still exporting; flushing, not shutting down"
                );
                tokio::task::spawn_blocking(move || shared.flush()).await??;
            }
        }
    }
    Ok(())
}

/// The pipeline's options: what `args` asks for, the API's marks, and the OTLP export of every
/// window and verdict.
fn node_options(
    args: &Args,
    tls: inferscope::tls::TlsOptions,
    marks: Marks,
    otlp: Option<&Arc<OtlpExporter>>,
) -> NodeOptions {
    let finder = args.finder();
    let servers = finder.targets();
    if servers.is_empty() {
        tracing::info!(
            "no inference server found yet; looking again every {REDISCOVER_EVERY} windows"
        );
    } else {
        tracing::info!("watching server processes {}", pid_list(&servers));
    }
    let metrics_url = args.metrics_url.clone();
    if let Some(url) = &metrics_url {
        tracing::info!(
            "server metrics: {url} for the server listening on its port (or the only one); the others' found on their listening ports"
        );
    } else {
        tracing::info!(
            "server metrics: looking for them on each server's listening ports (or give --metrics-url)"
        );
    }
    let tls_for_find = tls.clone();
    let pods = pod_source(args, &tls);
    let mut opts = NodeOptions::new(SessionOptions {
        servers,
        loadgen: None,
        cuda_targets: args.cuda_libs.clone(),
        kernel_without_servers: true,
        metrics_url,
        tls,
        window: args.interval,
    });
    opts.grouping = Grouping::PerServer;
    opts.keep = args.keep.max(1);
    // One server keeps all of --keep whatever it is; several share the total.
    opts.max_windows = opts.max_windows.max(opts.keep);
    tracing::info!(
        "one time line per server: {} windows each, {} over all servers, {} servers at most",
        opts.keep,
        opts.max_windows,
        opts.max_servers
    );
    if let Some(source) = pods {
        let index = watch_pods(source);
        opts.name_pods = Some(Box::new(move |c| {
            index
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .identity(c)
        }));
    }
    opts.marks = Some(marks);
    opts.discover = Some(Box::new(move || finder.targets()));
    opts.rediscover_every = REDISCOVER_EVERY;
    opts.keep_joins = false;
    let find_tls = tls_for_find;
    opts.find_metrics = Some(Box::new(move |pids: Vec<u32>| {
        let tls = find_tls.clone();
        Box::pin(async move { find_metrics(&pids, &tls).await })
    }));
    if let Some(x) = otlp {
        let x = Arc::clone(x);
        opts.observers.push(Box::new(
            move |s: &inferscope::collect::identity::ServerIdentity,
                  w: &inferscope::collect::timeline::Window,
                  v: &inferscope::attribute::WindowVerdict| {
                let labels = Labels::of_server(s);
                x.record_window(w, &labels);
                x.record_verdict(&v.verdict, &labels);
            },
        ));
    }
    opts
}

/// Where pod names are read: `--pods-url` (with the service account's token and CA when the
/// daemon runs in a pod, else `--ca-file`), else the API server when in a cluster.
fn pod_source(args: &Args, tls: &inferscope::tls::TlsOptions) -> Option<PodSource> {
    let env = |k: &str| std::env::var(k).ok();
    let in_cluster = PodSource::in_cluster(env);
    let source = match (&args.pods_url, in_cluster) {
        (Some(url), Some(c)) => Some(PodSource {
            url: url.clone(),
            ..c
        }),
        (Some(url), None) => Some(PodSource {
            url: url.clone(),
            token_file: None,
            tls: tls.clone(),
        }),
        (None, c) => c,
    };
    if let Some(s) = &source {
        tracing::info!("pod names: from {}", s.url);
    } else {
        tracing::info!(
            "pod names: no pod list (not in a cluster, no --pods-url); pods are named by their UIDs"
        );
    }
    source
}

/// Reads the pod list now and every [`PODS_EVERY`] into the index it returns; says when it
/// could not (once per new reason).
fn watch_pods(source: PodSource) -> Arc<Mutex<PodIndex>> {
    let index = Arc::new(Mutex::new(PodIndex::default()));
    let shared = Arc::clone(&index);
    tokio::spawn(async move {
        let mut last_error = None;
        let mut said = false;
        loop {
            match source.fetch().await {
                Ok(list) => {
                    if !said {
                        tracing::info!("pod names: {} pods on this node", list.len());
                        said = true;
                    }
                    last_error = None;
                    *shared.lock().unwrap_or_else(PoisonError::into_inner) = list;
                }
                Err(e) => {
                    let msg = e.to_string();
                    if last_error.as_ref() != Some(&msg) {
                        tracing::warn!("pod names: {msg}; pods keep their UIDs");
                        last_error = Some(msg);
                    }
                }
            }
            tokio::time::sleep(PODS_EVERY).await;
        }
    });
    index
}

/// The metrics endpoint of the first of `pids` that exports a known server's metrics on one
/// of its listening addresses; what was found on each is logged.
async fn find_metrics(pids: &[u32], tls: &inferscope::tls::TlsOptions) -> Option<String> {
    let mut url = None;
    for &pid in pids {
        let addrs = tokio::task::spawn_blocking(move || discover::listening_addrs(pid))
            .await
            .unwrap_or_default();
        let found = inferscope::scrape::find::metrics_on(&addrs, tls).await;
        tracing::info!("server {pid} ({}): {found}", procfs::comm(pid));
        if url.is_none() {
            url = found.url().map(str::to_string);
        }
    }
    url
}

/// Waits (5 s at most each) for the HTTP servers to drain after the stop was signalled.
async fn join_servers(
    http: tokio::task::JoinHandle<std::io::Result<()>>,
    api: tokio::task::JoinHandle<Result<(), inferscope::api::ApiError>>,
) {
    let http = async { http.await.map(|r| r.map_err(|e| e.to_string())) };
    let api = async { api.await.map(|r| r.map_err(|e| e.to_string())) };
    let (http, api) = tokio::join!(
        tokio::time::timeout(Duration::from_secs(5), http),
        tokio::time::timeout(Duration::from_secs(5), api)
    );
    for (what, result) in [("metrics", http), ("control API", api)] {
        match result {
            Ok(Ok(Err(e))) => tracing::warn!("{what}: {e}"),
            Ok(Err(e)) => tracing::warn!("{what}: {e}"),
            Ok(Ok(Ok(()))) => {}
            Err(_) => tracing::warn!("{what} did not stop within 5s; leaving it"),
        }
    }
}

fn pid_list(pids: &[u32]) -> String {
    pids.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

//! The node daemon assembled: the control API with the embedded load generator behind it, the
//! one collection pipeline with a time line and verdict per server, `/metrics` and the read
//! routes, trigger rules and the OTLP export. `inferscope daemon` parses its flags into
//! [`DaemonOptions`] and calls [`Daemon::start`] then [`Daemon::run`]; a test does the same in
//! process.
//!
//! ```no_run
//! # async fn demo() -> Result<(), inferscope::daemon::DaemonError> {
//! use inferscope::daemon::{Daemon, DaemonOptions};
//! let daemon = Daemon::start(DaemonOptions {
//!     metrics_listen: "127.0.0.1:0".parse().unwrap(),
//!     api_listen: "127.0.0.1:0".parse().unwrap(),
//!     ..DaemonOptions::default()
//! })
//! .await?;
//! println!("http://{}/metrics", daemon.metrics_addr());
//! daemon.run(tokio::time::sleep(std::time::Duration::from_secs(5))).await?;
//! # Ok(())
//! # }
//! ```

mod finder;
mod pipeline;
mod pods;
mod triggers;

use std::{future::Future, net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use self::finder::Finder;
use crate::{
    api::{
        Api, ApiConfig, ApiError, Bind, LoadgenLauncher, MarkingLauncher, Marks, Token,
        check_distinct, node, require_token, serve,
    },
    dial::Reach,
    export::otlp::{OtlpError, OtlpExporter, Sampler, live::DEFAULT_SAMPLE},
    node::Node,
    probes::privileges,
    tls::TlsOptions,
    triggers::{Counts, Firing, Rule},
};

/// What the daemon watches, where it serves, what it exports.
pub struct DaemonOptions {
    /// Which processes are servers (none given: every process mapping libcuda).
    pub finder: Finder,
    /// A server's Prometheus endpoint, scraped for the server listening on its port (or the
    /// only server); every other server's is found on its own listening addresses.
    pub metrics_url: Option<String>,
    /// The pod list to name pods from (default in a pod: the API server's pods of this node).
    pub pods_url: Option<String>,
    /// More libraries or binaries to hook the CUDA driver API in.
    pub cuda_libs: Vec<PathBuf>,
    /// Where `/metrics` and `/api/v1/timeline` are served (port 0: any free port).
    pub metrics_listen: SocketAddr,
    /// Bearer token file for `/metrics`; needed for any address other than loopback.
    pub metrics_token_file: Option<PathBuf>,
    /// Window length of the time line.
    pub interval: Duration,
    /// Windows kept in memory per server.
    pub keep: usize,
    /// Where the control API is served.
    pub api_listen: Bind,
    /// Bearer token file for the control API.
    pub api_token_file: Option<PathBuf>,
    /// Where posted runs and trigger webhooks may connect (beyond loopback with
    /// `--allow-remote`).
    pub reach: Reach,
    /// The folder posted runs may read dataset and trace files from.
    pub data_dir: Option<PathBuf>,
    /// TLS for an https:// `metrics_url`, the pod list and posted runs' targets.
    pub tls: TlsOptions,
    /// Show watched processes' full command lines in `/api/v1/timeline`.
    pub show_cmdlines: bool,
    /// Trigger rules judged on every window.
    pub triggers: Vec<Rule>,
    /// The OTLP export of windows, verdicts, firings and posted runs' requests.
    pub otlp: Option<OtlpExporter>,
}

impl Default for DaemonOptions {
    fn default() -> Self {
        Self {
            finder: Finder::default(),
            metrics_url: None,
            pods_url: None,
            cuda_libs: Vec::new(),
            metrics_listen: SocketAddr::from(([127, 0, 0, 1], 9464)),
            metrics_token_file: None,
            interval: Duration::from_secs(1),
            keep: 3600,
            api_listen: Bind::Tcp(SocketAddr::from(([127, 0, 0, 1], 7070))),
            api_token_file: None,
            reach: Reach::Loopback,
            data_dir: None,
            tls: TlsOptions::default(),
            show_cmdlines: false,
            triggers: Vec::new(),
            otlp: None,
        }
    }
}

/// Why the daemon did not start or did not stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// `/metrics` on a non-loopback address without a token.
    #[error("--metrics-listen {0} is not loopback: give --metrics-token-file with a bearer token")]
    MetricsTokenRequired(SocketAddr),
    /// A token file, the control API's bind or serving.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// Binding `/metrics`.
    #[error("binding --metrics-listen {addr}: {source}")]
    MetricsBind {
        /// Where.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// No kernel probe attached: the daemon would have nothing to say.
    #[error("{0}")]
    NoKernel(String),
    /// The OTLP export (its sampler, its shutdown).
    #[error(transparent)]
    Otlp(#[from] OtlpError),
    /// A task of the daemon ended in a panic.
    #[error("the {0} task failed: {1}")]
    Task(&'static str, tokio::task::JoinError),
}

/// A started daemon: bound, probes attached, collecting; [`Daemon::run`] serves until shutdown.
pub struct Daemon {
    node: Node,
    metrics_addr: SocketAddr,
    api_addr: Option<SocketAddr>,
    http: JoinHandle<std::io::Result<()>>,
    api: JoinHandle<Result<(), ApiError>>,
    triggers: Option<(JoinHandle<Vec<Firing>>, Arc<Counts>)>,
    otlp: Option<Arc<OtlpExporter>>,
    stop: CancellationToken,
}

/// What a daemon did, once stopped.
#[derive(Debug, Clone, Copy)]
pub struct Stopped {
    /// Servers that had a time line.
    pub servers: usize,
    /// Trigger firings.
    pub firings: usize,
}

impl Daemon {
    /// Binds `/metrics` and the control API (a refused bind fails before any probe is
    /// attached), attaches the probes and starts the pipeline. Call inside a tokio runtime.
    pub async fn start(mut opts: DaemonOptions) -> Result<Self, DaemonError> {
        report_capabilities();
        if !opts.metrics_listen.ip().is_loopback() && opts.metrics_token_file.is_none() {
            return Err(DaemonError::MetricsTokenRequired(opts.metrics_listen));
        }
        check_distinct(
            opts.metrics_token_file.as_deref(),
            opts.api_token_file.as_deref(),
        )?;
        let metrics_token = opts
            .metrics_token_file
            .as_deref()
            .map(Token::from_file)
            .transpose()?;
        let marks = Marks::default();
        let stop = CancellationToken::new();
        let otlp = opts.otlp.take().map(Arc::new);
        let api = bind_api(&opts, marks.clone(), otlp.as_ref()).await?;
        let api_addr = api.local_addr();
        let api = tokio::spawn(api.serve(stop.clone().cancelled_owned()));
        let listener = tokio::net::TcpListener::bind(opts.metrics_listen)
            .await
            .map_err(|source| DaemonError::MetricsBind {
                addr: opts.metrics_listen,
                source,
            })?;
        let metrics_addr = listener
            .local_addr()
            .map_err(|source| DaemonError::MetricsBind {
                addr: opts.metrics_listen,
                source,
            })?;

        let mut node_opts = pipeline::options(&opts, marks, otlp.as_ref());
        let rules = std::mem::take(&mut opts.triggers);
        let triggers = (!rules.is_empty())
            .then(|| triggers::start(rules, opts.reach, otlp.as_ref(), &mut node_opts));
        let (node, handle) = Node::start(node_opts);
        if !node.session().has_kernel() {
            stop.cancel();
            return Err(DaemonError::NoKernel(node.missing().first().map_or_else(
                || "the kernel probes did not start".to_owned(),
                String::clone,
            )));
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
            Arc::new(move || crate::export::prometheus::trigger_counts(&c.get(), c.dropped()))
                as node::ExtraMetrics
        });
        let mut app = node::routes_with(handle, otlp_drops, trigger_metrics, opts.show_cmdlines);
        if let Some(token) = metrics_token {
            app = app.layer(axum::middleware::from_fn_with_state(token, require_token));
        }
        tracing::info!(
            "serving http://{metrics_addr}/metrics and /api/v1/ (timeline, verdicts, report, report.html)"
        );
        // Header and request deadlines and a connection cap (api::serve).
        let http = tokio::spawn(serve::serve(
            listener,
            app,
            serve::Limits::default(),
            stop.clone().cancelled_owned(),
        ));
        Ok(Self {
            node,
            metrics_addr,
            api_addr,
            http,
            api,
            triggers,
            otlp,
            stop,
        })
    }

    /// Where `/metrics` and the read routes are served.
    #[must_use]
    pub fn metrics_addr(&self) -> SocketAddr {
        self.metrics_addr
    }

    /// Where the control API is served (`None` on a unix socket).
    #[must_use]
    pub fn api_addr(&self) -> Option<SocketAddr> {
        self.api_addr
    }

    /// Collects and serves until `shutdown` completes; then every server drains gracefully,
    /// the trigger actions finish, the HTTP servers stop and the probes detach.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<Stopped, DaemonError> {
        let finished = self.node.run(shutdown).await;
        let mut firings = 0;
        if let Some((runner, _)) = self.triggers {
            let fired = runner
                .await
                .map_err(|e| DaemonError::Task("trigger action", e))?;
            tracing::info!("triggers: {} firing(s) this run", fired.len());
            firings = fired.len();
        }
        self.stop.cancel();
        join_servers(self.http, self.api).await;
        finish_otlp(self.otlp).await?;
        // The collectors stopped with the node: every link is detached, nothing was pinned.
        tracing::info!(
            "inferscope daemon: stopped; {} server(s) had a time line",
            finished.servers
        );
        Ok(Stopped {
            servers: finished.servers,
            firings,
        })
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
        if caps & (1 << cap) != 0 {
            tracing::info!("capability {name}: yes");
        } else {
            tracing::info!("capability {name}: missing: disables {disables}");
        }
    }
}

/// Binds the control API with the embedded load generator behind it; posted scenarios read
/// dataset and trace files only below `data_dir`, and their phases are marked on the time line.
async fn bind_api(
    opts: &DaemonOptions,
    marks: Marks,
    otlp: Option<&Arc<OtlpExporter>>,
) -> Result<Api, DaemonError> {
    let config = ApiConfig {
        bind: opts.api_listen.clone(),
        token_file: opts.api_token_file.clone(),
        ..ApiConfig::default()
    };
    let mut loadgen =
        LoadgenLauncher::new(opts.reach, opts.data_dir.clone()).with_tls(opts.tls.clone());
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
        || opts.api_listen.to_string(),
        |a| format!("http://{a}/api/v1/"),
    );
    tracing::info!("control API on {at} (runs, marks)");
    Ok(api)
}

/// Shuts the OTLP export down and logs what it delivered.
async fn finish_otlp(otlp: Option<Arc<OtlpExporter>>) -> Result<(), DaemonError> {
    let Some(x) = otlp else {
        return Ok(());
    };
    match Arc::try_unwrap(x) {
        Ok(x) => {
            let stats = tokio::task::spawn_blocking(move || x.shutdown())
                .await
                .map_err(|e| DaemonError::Task("OTLP shutdown", e))??;
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
            tracing::warn!("OTLP: a posted run is still exporting; flushing, not shutting down");
            tokio::task::spawn_blocking(move || shared.flush())
                .await
                .map_err(|e| DaemonError::Task("OTLP flush", e))??;
        }
    }
    Ok(())
}

/// Waits (5 s at most each) for the HTTP servers to drain after the stop was signalled.
async fn join_servers(
    http: JoinHandle<std::io::Result<()>>,
    api: JoinHandle<Result<(), ApiError>>,
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

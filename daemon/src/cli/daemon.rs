//! `inferscope daemon`: the node-level mode's flags, read into [`DaemonOptions`] and run by
//! [`inferscope::daemon`] until SIGTERM, Ctrl-C or `--duration`.

use std::{net::SocketAddr, path::PathBuf, process::ExitCode, time::Duration};

use anyhow::Context as _;
use inferscope::{
    api::Bind,
    daemon::{Daemon, DaemonOptions, Finder},
    dial::Reach,
    triggers,
};

use super::otlp::OtlpArgs;

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
    /// The daemon these flags ask for; a bad `--ca-file`, triggers file or OTLP setting fails
    /// here, before anything is bound or attached.
    fn options(&self) -> anyhow::Result<DaemonOptions> {
        let tls = self.tls.options()?;
        if self.tls.insecure() {
            tracing::warn!("{}", super::tls::INSECURE_WARNING);
        }
        let reach = Reach::from_flag(self.allow_remote);
        let triggers = match &self.triggers {
            Some(file) => {
                let rules = triggers::load_file(file)?;
                triggers::check_remote(&rules, reach)?;
                rules
            }
            None => Vec::new(),
        };
        Ok(DaemonOptions {
            finder: Finder {
                ports: self.ports.clone(),
                pids: self.pids.clone(),
                names: self.names.clone(),
            },
            metrics_url: self.metrics_url.clone(),
            pods_url: self.pods_url.clone(),
            cuda_libs: self.cuda_libs.clone(),
            metrics_listen: self.metrics_listen,
            metrics_token_file: self.metrics_token_file.clone(),
            interval: self.interval,
            keep: self.keep,
            api_listen: self.api_listen.clone(),
            api_token_file: self.api_token_file.clone(),
            reach,
            data_dir: self.data_dir.clone(),
            tls,
            show_cmdlines: self.show_cmdlines,
            triggers,
            otlp: self.otlp.start(&[])?,
        })
    }
}

/// Runs the daemon until SIGTERM, Ctrl-C or `--duration`.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Runtime::new().context("starting the tokio runtime")?;
    rt.block_on(async {
        let daemon = Daemon::start(args.options()?).await?;
        let duration = args.duration;
        daemon
            .run(async move {
                let mut term =
                    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    {
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
            .await?;
        Ok(ExitCode::SUCCESS)
    })
}

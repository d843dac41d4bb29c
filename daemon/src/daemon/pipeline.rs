//! The collection pipeline as the daemon runs it: one time line per server, servers found
//! again every [`REDISCOVER_EVERY`] windows, pods named from the pod list, each server's
//! metrics endpoint found on its listening addresses, every window and verdict exported.

use std::sync::{Arc, PoisonError};

use super::{DaemonOptions, finder::pid_list, pods};
use crate::{
    api::Marks,
    attribute::WindowVerdict,
    collect::{
        catalog::Labels, discover, identity::ServerIdentity, procfs, session::SessionOptions,
        timeline::Window,
    },
    export::otlp::OtlpExporter,
    node::{Grouping, NodeOptions},
    tls::TlsOptions,
};

/// Re-discover servers every this many windows.
const REDISCOVER_EVERY: u64 = 10;

/// The pipeline's options: what `opts` asks for, the API's marks, and the OTLP export of every
/// window and verdict.
pub(super) fn options(
    opts: &DaemonOptions,
    marks: Marks,
    otlp: Option<&Arc<OtlpExporter>>,
) -> NodeOptions {
    let finder = opts.finder.clone();
    let servers = finder.targets();
    if servers.is_empty() {
        tracing::info!(
            "no inference server found yet; looking again every {REDISCOVER_EVERY} windows"
        );
    } else {
        tracing::info!("watching server processes {}", pid_list(&servers));
    }
    let metrics_url = opts.metrics_url.clone();
    if let Some(url) = &metrics_url {
        tracing::info!(
            "server metrics: {url} for the server listening on its port (or the only one); the others' found on their listening ports"
        );
    } else {
        tracing::info!(
            "server metrics: looking for them on each server's listening ports (or give --metrics-url)"
        );
    }
    let pods = pods::source(opts.pods_url.as_deref(), &opts.tls);
    let mut node = NodeOptions::new(SessionOptions {
        servers,
        loadgen: None,
        cuda_targets: opts.cuda_libs.clone(),
        kernel_without_servers: true,
        metrics_url,
        tls: opts.tls.clone(),
        window: opts.interval,
    });
    node.grouping = Grouping::PerServer;
    node.keep = opts.keep.max(1);
    // One server keeps all of `keep` whatever it is; several share the total.
    node.max_windows = node.max_windows.max(node.keep);
    tracing::info!(
        "one time line per server: {} windows each, {} over all servers, {} servers at most",
        node.keep,
        node.max_windows,
        node.max_servers
    );
    if let Some(source) = pods {
        let index = pods::watch(source);
        node.name_pods = Some(Box::new(move |c| {
            index
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .identity(c)
        }));
    }
    node.marks = Some(marks);
    node.discover = Some(Box::new(move || finder.targets()));
    node.rediscover_every = REDISCOVER_EVERY;
    node.keep_joins = false;
    let tls = opts.tls.clone();
    node.find_metrics = Some(Box::new(move |pids: Vec<u32>| {
        let tls = tls.clone();
        Box::pin(async move { find_metrics(&pids, &tls).await })
    }));
    if let Some(x) = otlp {
        let x = Arc::clone(x);
        node.observers.push(Box::new(
            move |s: &ServerIdentity, w: &Window, v: &WindowVerdict| {
                let labels = Labels::of_server(s);
                x.record_window(w, &labels);
                x.record_verdict(v, &labels);
            },
        ));
    }
    node
}

/// The metrics endpoint of the first of `pids` that exports a known server's metrics on one
/// of its listening addresses; what was found on each is logged.
async fn find_metrics(pids: &[u32], tls: &TlsOptions) -> Option<String> {
    let mut url = None;
    for &pid in pids {
        let addrs = tokio::task::spawn_blocking(move || discover::listening_addrs(pid))
            .await
            .unwrap_or_default();
        let found = crate::scrape::find::metrics_on(&addrs, tls).await;
        tracing::info!("server {pid} ({}): {found}", procfs::comm(pid));
        if url.is_none() {
            url = found.url().map(str::to_string);
        }
    }
    url
}

//! Pod names for the daemon's servers: where the pod list is read, and the task that reads it
//! again every [`PODS_EVERY`].

use std::{
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use crate::{
    collect::pods::{PodIndex, PodSource},
    tls::TlsOptions,
};

/// How often the pod list is read again.
const PODS_EVERY: Duration = Duration::from_secs(30);

/// Where pod names are read: `pods_url` (with the service account's token and CA when the
/// daemon runs in a pod, else `tls`), else the API server when in a cluster.
pub(super) fn source(pods_url: Option<&str>, tls: &TlsOptions) -> Option<PodSource> {
    let env = |k: &str| std::env::var(k).ok();
    let in_cluster = PodSource::in_cluster(env);
    let source = match (pods_url, in_cluster) {
        (Some(url), Some(c)) => Some(PodSource {
            url: url.to_owned(),
            ..c
        }),
        (Some(url), None) => Some(PodSource {
            url: url.to_owned(),
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
pub(super) fn watch(source: PodSource) -> Arc<Mutex<PodIndex>> {
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

//! Kubernetes names for the containers found on the node: this node's pod list, from the API
//! server (`GET /api/v1/pods?fieldSelector=spec.nodeName%3DNODE` with the `DaemonSet`'s service
//! account, read-only) or the kubelet (`GET https://NODE:10250/pods`, the same `PodList`).
//! Without either the pods are still told apart by the UIDs of their cgroup paths
//! ([`super::cgroup`]); the names are a lookup on top.

use std::{collections::HashMap, path::PathBuf, time::Duration};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::{Request, Uri, header};
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector},
    rt::TokioExecutor,
};
use serde::Deserialize;

use super::{cgroup::Container, identity::K8sIdentity};
use crate::tls::{TlsConnector, TlsOptions};

/// Where a pod running in the cluster finds its service account.
const SERVICE_ACCOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Largest pod list read, bytes (a node runs at most a few hundred pods).
const BODY_LIMIT: usize = 32 << 20;

/// Why the pod list could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PodsError {
    /// The URL is not a valid `http(s)://` URL.
    #[error("pod list URL {url}: {reason}")]
    Url {
        /// As given.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// TLS could not be configured.
    #[error("pod list {url}: TLS: {reason}")]
    Tls {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// The bearer token file could not be read.
    #[error("pod list: token file {}: {reason}", path.display())]
    Token {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The request failed or timed out.
    #[error("pod list {url}: {reason}")]
    Http {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// The answer was not 200 (403: the service account may not list pods).
    #[error("pod list {url}: HTTP {status}{hint}")]
    Status {
        /// The URL.
        url: String,
        /// The status.
        status: u16,
        /// What to do about it.
        hint: &'static str,
    },
    /// The answer is not a `PodList`.
    #[error("pod list {url}: not a PodList: {reason}")]
    Parse {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
}

/// Where this node's pod list is read, and with which credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSource {
    /// The pod list's full URL.
    pub url: String,
    /// A bearer token file (the service account's).
    pub token_file: Option<PathBuf>,
    /// Whom an `https://` server's certificate must come from.
    pub tls: TlsOptions,
}

impl PodSource {
    /// The API server as a pod sees it (`KUBERNETES_SERVICE_HOST`/`_PORT`), this node's pods
    /// only (`K8S_NODE_NAME` or `NODE_NAME`, from the downward API), with the service
    /// account's token and CA; `None` outside a cluster or without the node's name.
    #[must_use]
    pub fn in_cluster(env: impl Fn(&str) -> Option<String>) -> Option<Self> {
        let host = env("KUBERNETES_SERVICE_HOST")?;
        let port = env("KUBERNETES_SERVICE_PORT").unwrap_or_else(|| "443".into());
        let node = env("K8S_NODE_NAME").or_else(|| env("NODE_NAME"))?;
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host
        };
        let sa = PathBuf::from(SERVICE_ACCOUNT);
        Some(Self {
            url: format!("https://{host}:{port}/api/v1/pods?fieldSelector=spec.nodeName%3D{node}"),
            token_file: Some(sa.join("token")),
            tls: TlsOptions {
                ca_file: Some(sa.join("ca.crt")),
                insecure: false,
            },
        })
    }

    /// Reads the pod list once (10 s at most).
    pub async fn fetch(&self) -> Result<PodIndex, PodsError> {
        let url = self.url.clone();
        let uri: Uri = url
            .parse()
            .map_err(|e: hyper::http::uri::InvalidUri| PodsError::Url {
                url: url.clone(),
                reason: e.to_string(),
            })?;
        let tls = match uri.scheme_str() {
            Some("https") => Some(self.tls.client_config().map_err(|e| PodsError::Tls {
                url: url.clone(),
                reason: e.to_string(),
            })?),
            Some("http") => None,
            _ => {
                return Err(PodsError::Url {
                    url,
                    reason: "give an http:// or https:// URL".into(),
                });
            }
        };
        let timeout = Duration::from_secs(10);
        let mut tcp = HttpConnector::new();
        tcp.enforce_http(false);
        tcp.set_connect_timeout(Some(timeout));
        let client: Client<_, Empty<Bytes>> =
            Client::builder(TokioExecutor::new()).build(TlsConnector::new(tcp, tls, timeout));
        let mut req = Request::get(uri).header(header::ACCEPT, "application/json");
        if let Some(path) = &self.token_file {
            let token = std::fs::read_to_string(path).map_err(|e| PodsError::Token {
                path: path.clone(),
                reason: e.to_string(),
            })?;
            req = req.header(header::AUTHORIZATION, format!("Bearer {}", token.trim()));
        }
        let req = req.body(Empty::new()).map_err(|e| PodsError::Url {
            url: url.clone(),
            reason: e.to_string(),
        })?;
        let http = |reason: String| PodsError::Http {
            url: url.clone(),
            reason,
        };
        let resp = tokio::time::timeout(timeout, client.request(req))
            .await
            .map_err(|_| http(format!("no answer within {timeout:?}")))?
            .map_err(|e| http(e.to_string()))?;
        let status = resp.status().as_u16();
        if status != 200 {
            return Err(PodsError::Status {
                url,
                status,
                hint: if status == 403 || status == 401 {
                    " (the service account needs `get`/`list` on pods: deploy/kubernetes/rbac.yaml)"
                } else {
                    ""
                },
            });
        }
        let body = tokio::time::timeout(
            timeout,
            Limited::new(resp.into_body(), BODY_LIMIT).collect(),
        )
        .await
        .map_err(|_| http(format!("the body did not come within {timeout:?}")))?
        .map_err(|e| http(e.to_string()))?
        .to_bytes();
        PodIndex::parse(&body).map_err(|e| PodsError::Parse {
            url,
            reason: e.to_string(),
        })
    }
}

/// The `PodList` fields read (the API server's and the kubelet's answers are the same type).
#[derive(Deserialize)]
struct PodList {
    #[serde(default)]
    items: Vec<Pod>,
}

#[derive(Deserialize)]
struct Pod {
    metadata: Meta,
    #[serde(default)]
    status: PodStatus,
}

#[derive(Deserialize)]
struct Meta {
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    uid: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct PodStatus {
    #[serde(default)]
    container_statuses: Vec<ContainerStatus>,
    #[serde(default)]
    init_container_statuses: Vec<ContainerStatus>,
}

#[derive(Deserialize)]
struct ContainerStatus {
    name: String,
    /// `containerd://<id>`, `cri-o://<id>`, `docker://<id>`; absent until it started.
    #[serde(default, rename = "containerID")]
    container_id: Option<String>,
}

/// Names by pod UID and by container ID, from one pod list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodIndex {
    /// Pod UID -> (name, namespace).
    pods: HashMap<String, (String, Option<String>)>,
    /// Container ID -> its name in the pod.
    containers: HashMap<String, String>,
}

impl PodIndex {
    /// Reads a `PodList` answer.
    pub fn parse(body: &[u8]) -> Result<Self, serde_json::Error> {
        let list: PodList = serde_json::from_slice(body)?;
        let mut index = Self::default();
        for pod in list.items {
            let statuses = pod
                .status
                .container_statuses
                .into_iter()
                .chain(pod.status.init_container_statuses);
            for c in statuses {
                if let Some((_, id)) = c.container_id.as_deref().and_then(|s| s.split_once("://")) {
                    index.containers.insert(id.to_ascii_lowercase(), c.name);
                }
            }
            index.pods.insert(
                pod.metadata.uid.to_ascii_lowercase(),
                (pod.metadata.name, pod.metadata.namespace),
            );
        }
        Ok(index)
    }

    /// The pods listed.
    #[must_use]
    pub fn len(&self) -> usize {
        self.pods.len()
    }

    /// Whether no pod is listed.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// Whether this list names container `id`.
    #[must_use]
    pub fn knows(&self, id: &str) -> bool {
        self.containers.contains_key(id)
    }

    /// The Kubernetes identity of `c` (a pod's container): names where this list has them.
    #[must_use]
    pub fn identity(&self, c: &Container) -> Option<K8sIdentity> {
        let uid = c.pod_uid.clone()?;
        let pod = self.pods.get(&uid);
        Some(K8sIdentity {
            pod_name: pod.map(|(n, _)| n.clone()),
            namespace: pod.and_then(|(_, ns)| ns.clone()),
            container_name: self.containers.get(&c.id).cloned(),
            container_id: c.id.clone(),
            pod_uid: uid,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::cgroup::Runtime;

    const ID: &str = "4f3c2b1a09e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a29180f7e6d5c4b3a29180";
    const UID: &str = "1b2c3d4e-5f6a-7b8c-9d0e-1f2a3b4c5d6e";

    /// What the kubelet's `/pods` (or the API server's pod list) answers: a test double of it,
    /// trimmed to the fields read, shaped as the real answer is.
    fn kubelet_pod_list_double() -> String {
        std::fs::read_to_string(format!(
            "{}/tests/fixtures/kubelet-pods-double.json",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap()
    }

    fn container() -> Container {
        Container {
            id: ID.into(),
            runtime: Runtime::Containerd,
            pod_uid: Some(UID.into()),
        }
    }

    #[test]
    fn a_pod_list_names_the_pod_its_namespace_and_the_container() {
        let index = PodIndex::parse(kubelet_pod_list_double().as_bytes()).unwrap();
        assert_eq!(index.len(), 2);
        let k = index.identity(&container()).unwrap();
        assert_eq!(k.pod_name.as_deref(), Some("vllm-llama-0"));
        assert_eq!(k.namespace.as_deref(), Some("inference"));
        assert_eq!(k.container_name.as_deref(), Some("vllm"));
        // A container the list does not have yet keeps its pod's names and its ID.
        let mut other = container();
        other.id = "ab".repeat(32);
        let k = index.identity(&other).unwrap();
        assert_eq!(k.pod_name.as_deref(), Some("vllm-llama-0"));
        assert_eq!(k.container_name, None);
        // A plain container is in no pod.
        other.pod_uid = None;
        assert_eq!(index.identity(&other), None);
        assert!(
            PodIndex::parse(b"{\"kind\": \"Status\"}")
                .unwrap()
                .is_empty()
        );
        assert!(PodIndex::parse(b"not json").is_err());
    }

    #[test]
    fn in_a_cluster_the_api_server_lists_this_node_s_pods() {
        let env = |k: &str| match k {
            "KUBERNETES_SERVICE_HOST" => Some("10.96.0.1".to_owned()),
            "K8S_NODE_NAME" => Some("gpu-node-3".to_owned()),
            _ => None,
        };
        let s = PodSource::in_cluster(env).unwrap();
        assert_eq!(
            s.url,
            "https://10.96.0.1:443/api/v1/pods?fieldSelector=spec.nodeName%3Dgpu-node-3"
        );
        assert!(s.token_file.unwrap().ends_with("serviceaccount/token"));
        assert!(PodSource::in_cluster(|_| None).is_none());
    }

    /// Serves `body` once on loopback with `status`; returns its URL and the request it got.
    async fn serve_once(status: u16, body: String) -> (String, tokio::task::JoinHandle<String>) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/pods", l.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut req = vec![0u8; 4096];
            let n = s.read(&mut req).await.unwrap();
            let head = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            s.write_all(head.as_bytes()).await.unwrap();
            s.write_all(body.as_bytes()).await.unwrap();
            String::from_utf8_lossy(&req[..n]).into_owned()
        });
        (url, task)
    }

    #[tokio::test]
    async fn names_are_looked_up_from_a_kubelet_test_double_with_the_token() {
        let (url, got) = serve_once(200, kubelet_pod_list_double()).await;
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "s3cret\n").unwrap();
        let source = PodSource {
            url,
            token_file: Some(token),
            tls: TlsOptions::default(),
        };
        let index = source.fetch().await.unwrap();
        assert_eq!(
            index.identity(&container()).unwrap().pod_name.as_deref(),
            Some("vllm-llama-0")
        );
        let req = got.await.unwrap();
        assert!(req.starts_with("GET /pods HTTP/1.1"), "{req}");
        assert!(
            req.to_ascii_lowercase()
                .contains("authorization: bearer s3cret\r\n"),
            "{req}"
        );

        let (url, _got) = serve_once(403, "{}".into()).await;
        let source = PodSource {
            url,
            token_file: None,
            tls: TlsOptions::default(),
        };
        let e = source.fetch().await.unwrap_err().to_string();
        assert!(e.contains("HTTP 403") && e.contains("rbac.yaml"), "{e}");
    }
}

//! Who a server is on the node: a pod or a container (every process of it is one server) or,
//! outside containers, what a process listens on (a restarted server is the same server) or the
//! process itself; with its Kubernetes names when it runs in a pod. The key is what every
//! exported series, verdict and trigger firing carries as `server`.

use std::{collections::BTreeMap, fmt, str::FromStr};

use serde::{Deserialize, Serialize};

use super::{
    cgroup::{self, Container},
    discover,
};

/// What a server is keyed by on the node.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ServerKey {
    /// Every watched process together: `stress --explain`'s one target.
    Target,
    /// One hop of the pipeline behind the target (`stress --explain --service NAME=PORT`).
    Service(String),
    /// A process outside containers that listens on no TCP port, by its host pid (tgid).
    Process(u32),
    /// The processes outside containers listening on a TCP port (the lowest they hold) in a
    /// network namespace (`None`: the daemon's own).
    Listener {
        /// The port.
        port: u16,
        /// The network namespace's inode, when it is not the daemon's.
        netns: Option<u64>,
    },
    /// A container outside Kubernetes, by its ID (64 hex digits).
    Container(String),
    /// A Kubernetes pod, by its UID: its containers' processes are one server.
    Pod(String),
}

impl fmt::Display for ServerKey {
    /// `target`, `pid:1234`, `port:8000`, `port:8000@netns:4026532291`,
    /// `container:4f3c2b1a09e8` (the short ID `docker ps` shows), `pod:<uid>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerKey::Target => f.write_str("target"),
            ServerKey::Service(name) => write!(f, "service:{name}"),
            ServerKey::Process(pid) => write!(f, "pid:{pid}"),
            ServerKey::Listener { port, netns: None } => write!(f, "port:{port}"),
            ServerKey::Listener {
                port,
                netns: Some(n),
            } => write!(f, "port:{port}@netns:{n}"),
            ServerKey::Container(id) => write!(f, "container:{}", &id[..id.len().min(12)]),
            ServerKey::Pod(uid) => write!(f, "pod:{uid}"),
        }
    }
}

/// A `server` that names none of the servers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "server {0:?}: give `port:PORT[@netns:INODE]`, `pid:PID`, `container:ID` (12 or 64 hex digits), `pod:UID`, `service:NAME` or `target`"
)]
pub struct BadServerKey(pub String);

impl FromStr for ServerKey {
    type Err = BadServerKey;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BadServerKey(s.to_owned());
        match s.split_once(':') {
            None if s == "target" => Ok(ServerKey::Target),
            Some(("service", name)) if !name.is_empty() => Ok(ServerKey::Service(name.into())),
            Some(("pid", p)) => p.parse().map(ServerKey::Process).map_err(|_| bad()),
            Some(("port", rest)) => {
                let (port, netns) = match rest.split_once("@netns:") {
                    Some((p, n)) => (p, Some(n.parse().map_err(|_| bad())?)),
                    None => (rest, None),
                };
                let port = port.parse().map_err(|_| bad())?;
                Ok(ServerKey::Listener { port, netns })
            }
            Some(("pod", uid)) if uid.len() == 36 => Ok(ServerKey::Pod(uid.to_ascii_lowercase())),
            Some(("container", id))
                if matches!(id.len(), 12 | 64) && id.bytes().all(|b| b.is_ascii_hexdigit()) =>
            {
                Ok(ServerKey::Container(id.to_ascii_lowercase()))
            }
            _ => Err(bad()),
        }
    }
}

impl Serialize for ServerKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ServerKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl ServerKey {
    /// Whether `self` is the server `asked` names (a container may be asked by its short ID).
    #[must_use]
    pub fn answers_to(&self, asked: &ServerKey) -> bool {
        match (self, asked) {
            (ServerKey::Container(id), ServerKey::Container(short)) => id.starts_with(short),
            _ => self == asked,
        }
    }
}

/// A container's Kubernetes identity: UIDs from its cgroup path, names from the pod list when
/// it could be read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct K8sIdentity {
    /// The pod's UID.
    pub pod_uid: String,
    /// The pod's name; `None` until a pod list named it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_name: Option<String>,
    /// The pod's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The container's name in its pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_name: Option<String>,
    /// The container's ID.
    pub container_id: String,
}

impl K8sIdentity {
    /// The OpenTelemetry semantic-convention attributes (`k8s.pod.name`, ...), names falling
    /// back to UIDs: `k8s.pod.name` is the pod UID and `k8s.container.name` the container ID
    /// until the pod list names them; `k8s.namespace.name` only when known.
    #[must_use]
    pub fn attributes(&self) -> Vec<(&'static str, String)> {
        let mut out = vec![
            (
                "k8s.pod.name",
                self.pod_name
                    .clone()
                    .unwrap_or_else(|| self.pod_uid.clone()),
            ),
            ("k8s.pod.uid", self.pod_uid.clone()),
        ];
        if let Some(ns) = &self.namespace {
            out.push(("k8s.namespace.name", ns.clone()));
        }
        out.push((
            "k8s.container.name",
            self.container_name
                .clone()
                .unwrap_or_else(|| self.container_id.clone()),
        ));
        out
    }
}

/// A server's identity as exported: its key and, in a pod, its Kubernetes names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ServerIdentity {
    /// The key as text: `pid:1234`, `container:4f3c2b1a09e8` or `target`.
    pub server: String,
    /// The server's program (`/proc/<pid>/comm` of its first process).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<String>,
    /// Its pod and container, when it runs in one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k8s: Option<K8sIdentity>,
}

impl ServerIdentity {
    /// The identity of `key` without names.
    #[must_use]
    pub fn of(key: &ServerKey) -> Self {
        Self {
            server: key.to_string(),
            process: None,
            k8s: None,
        }
    }

    /// `server`, then the Kubernetes attributes: the labels of every series of this server
    /// (OTLP keys; Prometheus writes the dots as underscores).
    #[must_use]
    pub fn attributes(&self) -> Vec<(&'static str, String)> {
        let mut out = vec![("server", self.server.clone())];
        out.extend(self.k8s.iter().flat_map(K8sIdentity::attributes));
        out
    }

    /// The environment of a trigger's command: `INFERSCOPE_SERVER` and, in a pod,
    /// `INFERSCOPE_K8S_POD_NAME`, `INFERSCOPE_K8S_NAMESPACE_NAME`, ...
    #[must_use]
    pub fn env(&self) -> Vec<(String, String)> {
        self.attributes()
            .into_iter()
            .map(|(k, v)| {
                let name = format!("INFERSCOPE_{}", k.replace('.', "_").to_ascii_uppercase());
                (name, v)
            })
            .collect()
    }
}

/// Where a process runs, as far as its grouping into servers goes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Place {
    /// Its container, when it runs in one.
    pub container: Option<Container>,
    /// The lowest TCP port it listens on, with its network namespace (`None`: the daemon's).
    pub listener: Option<(u16, Option<u64>)>,
}

impl Place {
    /// The key of the server a process in this place belongs to: its pod, its container, its
    /// listener, else itself.
    #[must_use]
    pub fn key(&self, pid: u32) -> ServerKey {
        match (&self.container, self.listener) {
            (Some(c), _) => match &c.pod_uid {
                Some(uid) => ServerKey::Pod(uid.clone()),
                None => ServerKey::Container(c.id.clone()),
            },
            (None, Some((port, netns))) => ServerKey::Listener { port, netns },
            (None, None) => ServerKey::Process(pid),
        }
    }

    /// Where `pid` runs, from `/proc`.
    #[must_use]
    pub fn of(pid: u32) -> Self {
        let container = cgroup::of_pid(pid);
        let listener = if container.is_some() {
            None
        } else {
            let own = discover::netns("self");
            discover::listening_ports(pid).first().map(|&port| {
                let ns = discover::netns(&pid.to_string());
                (port, ns.filter(|n| Some(*n) != own))
            })
        };
        Self {
            container,
            listener,
        }
    }
}

/// Parents walked up at most to find a lone process's server.
const MAX_ANCESTORS: usize = 8;

/// The server each of `pids` belongs to ([`Place::key`]); a lone process (no container, no
/// listener) joins the server of its nearest watched ancestor that has one (an engine's
/// worker processes under the API server that listens). A server's pids are sorted; servers
/// are ordered by key.
#[must_use]
pub fn group(
    pids: &[u32],
    place: impl Fn(u32) -> Place,
    parent: impl Fn(u32) -> Option<u32>,
) -> Servers {
    let places: BTreeMap<u32, Place> = pids.iter().map(|&p| (p, place(p))).collect();
    let key = |pid: u32, p: &Place| -> ServerKey {
        let own = p.key(pid);
        if own != ServerKey::Process(pid) {
            return own;
        }
        let mut at = pid;
        for _ in 0..MAX_ANCESTORS {
            let Some(up) = parent(at).filter(|&u| u > 1) else {
                break;
            };
            if let Some(k) = places
                .get(&up)
                .map(|q| q.key(up))
                .filter(|k| *k != ServerKey::Process(up))
            {
                return k;
            }
            at = up;
        }
        own
    };
    let mut out: Servers = BTreeMap::new();
    for (&pid, p) in &places {
        let entry = out.entry(key(pid, p)).or_insert_with(|| Found {
            pids: Vec::new(),
            container: p.container.clone(),
        });
        entry.pids.push(pid);
        entry.pids.sort_unstable();
        entry.pids.dedup();
    }
    out
}

/// [`group`] with the places read from `/proc`.
#[must_use]
pub fn group_on_host(pids: &[u32]) -> Servers {
    group(pids, Place::of, super::procfs::ppid)
}

/// The servers found, by key.
pub type Servers = BTreeMap<ServerKey, Found>;

/// A server's processes now and its container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// Its processes (host pids), sorted.
    pub pids: Vec<u32>,
    /// Its (first process's) container, when it runs in one.
    pub container: Option<Container>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::cgroup::Runtime;

    const ID: &str = "4f3c2b1a09e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a29180f7e6d5c4b3a29180";

    #[test]
    fn keys_print_and_parse() {
        for (key, text) in [
            (ServerKey::Target, "target"),
            (ServerKey::Service("search".into()), "service:search"),
            (ServerKey::Process(42), "pid:42"),
            (
                ServerKey::Listener {
                    port: 8000,
                    netns: None,
                },
                "port:8000",
            ),
            (
                ServerKey::Listener {
                    port: 8000,
                    netns: Some(4_026_532_291),
                },
                "port:8000@netns:4026532291",
            ),
            (ServerKey::Container(ID.into()), "container:4f3c2b1a09e8"),
            (
                ServerKey::Pod("1b2c3d4e-5f6a-7b8c-9d0e-1f2a3b4c5d6e".into()),
                "pod:1b2c3d4e-5f6a-7b8c-9d0e-1f2a3b4c5d6e",
            ),
        ] {
            assert_eq!(key.to_string(), text);
            let back: ServerKey = text.parse().unwrap();
            assert!(key.answers_to(&back), "{text}");
        }
        assert_eq!(
            format!("container:{ID}").parse::<ServerKey>().unwrap(),
            ServerKey::Container(ID.into())
        );
        assert!(!ServerKey::Process(4).answers_to(&ServerKey::Process(42)));
        for bad in [
            "pid:x",
            "container:zz",
            "node",
            "container:4f3c",
            "port:8000@netns:x",
            "pod:short",
        ] {
            assert!(bad.parse::<ServerKey>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_pod_s_processes_are_one_server_and_listeners_are_told_apart_by_namespace() {
        let place = |pid: u32| match pid {
            100.. => Place {
                container: Some(Container {
                    id: ID.into(),
                    runtime: Runtime::Containerd,
                    pod_uid: (pid < 200).then(|| "u".into()),
                }),
                listener: Some((8000, Some(1))),
            },
            10 | 11 => Place {
                container: None,
                listener: Some((8000, None)),
            },
            12 => Place {
                container: None,
                listener: Some((8000, Some(4))),
            },
            _ => Place::default(),
        };
        let servers = group(&[7, 101, 100, 3, 7, 10, 11, 12, 200], place, |_| None);
        let keys: Vec<String> = servers.keys().map(ToString::to_string).collect();
        assert_eq!(
            keys,
            [
                "pid:3",
                "pid:7",
                "port:8000",
                "port:8000@netns:4",
                "container:4f3c2b1a09e8",
                "pod:u"
            ]
        );
        assert_eq!(servers[&ServerKey::Pod("u".into())].pids, [100, 101]);
        let port = ServerKey::Listener {
            port: 8000,
            netns: None,
        };
        assert_eq!(servers[&port].pids, [10, 11]);
        assert!(servers[&port].container.is_none());
    }

    #[test]
    fn a_lone_process_joins_its_listening_ancestor() {
        let place = |pid: u32| Place {
            container: None,
            listener: (pid == 10).then_some((8000, None)),
        };
        // 10 listens; 12 is its grandchild through 11 (not watched); 20 is elsewhere.
        let parent = |pid: u32| match pid {
            12 => Some(11),
            11 => Some(10),
            10 | 20 => Some(1),
            _ => None,
        };
        let servers = group(&[10, 12, 20], place, parent);
        let keys: Vec<String> = servers.keys().map(ToString::to_string).collect();
        assert_eq!(keys, ["pid:20", "port:8000"]);
        let port = ServerKey::Listener {
            port: 8000,
            netns: None,
        };
        assert_eq!(servers[&port].pids, [10, 12]);
    }

    #[test]
    fn our_own_listener_places_us_on_its_port() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let me = std::process::id();
        // Other tests of this process open and close listeners meanwhile: read the place
        // between two equal readings of our lowest port.
        for _ in 0..100 {
            let before = discover::listening_ports(me)[0];
            let p = Place::of(me);
            if p.container.is_some() {
                return;
            }
            if discover::listening_ports(me)[0] == before {
                assert!(before <= port);
                assert_eq!(p.listener, Some((before, None)));
                return;
            }
        }
        panic!("our listening ports never held still for one reading");
    }

    #[test]
    fn kubernetes_attributes_fall_back_to_uids_and_name_the_environment() {
        let mut k = K8sIdentity {
            pod_uid: "uid-1".into(),
            container_id: ID.into(),
            ..K8sIdentity::default()
        };
        let id = ServerIdentity {
            server: "container:4f3c2b1a09e8".into(),
            process: None,
            k8s: Some(k.clone()),
        };
        assert_eq!(
            id.attributes(),
            [
                ("server", "container:4f3c2b1a09e8".to_owned()),
                ("k8s.pod.name", "uid-1".to_owned()),
                ("k8s.pod.uid", "uid-1".to_owned()),
                ("k8s.container.name", ID.to_owned()),
            ]
        );
        k.pod_name = Some("vllm-0".into());
        k.namespace = Some("llm".into());
        k.container_name = Some("engine".into());
        let id = ServerIdentity { k8s: Some(k), ..id };
        let env = id.env();
        assert!(env.contains(&("INFERSCOPE_K8S_POD_NAME".into(), "vllm-0".into())));
        assert!(env.contains(&("INFERSCOPE_K8S_NAMESPACE_NAME".into(), "llm".into())));
        assert!(env.contains(&("INFERSCOPE_K8S_CONTAINER_NAME".into(), "engine".into())));
        assert!(env.contains(&("INFERSCOPE_SERVER".into(), "container:4f3c2b1a09e8".into())));
    }
}

//! Which container (and which Kubernetes pod) a process runs in, from its cgroup path: no API
//! server needed. Container runtimes name a container's cgroup after its 64-hex ID, and the
//! kubelet names the pod's cgroup after the pod UID, in both cgroup v1 and v2 and with either
//! cgroup driver (`cgroupfs`: `/kubepods/burstable/pod<uid>/<id>`; `systemd`:
//! `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_with_underscores>.slice/cri-containerd-<id>.scope`).

use std::fmt;

use serde::Serialize;

/// The container runtime, as far as the cgroup path tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Runtime {
    /// containerd (`cri-containerd-<id>.scope`, `containerd-<id>.scope`).
    Containerd,
    /// CRI-O (`crio-<id>.scope`).
    CriO,
    /// Docker (`docker-<id>.scope`, `/docker/<id>`).
    Docker,
    /// A bare ID under the kubelet's `cgroupfs` driver: the path does not say.
    Unknown,
}

impl fmt::Display for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Runtime::Containerd => "containerd",
            Runtime::CriO => "cri-o",
            Runtime::Docker => "docker",
            Runtime::Unknown => "unknown",
        })
    }
}

/// A process's container, read from its cgroup path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Container {
    /// The container's ID: 64 lowercase hex digits.
    pub id: String,
    /// Who runs it.
    pub runtime: Runtime,
    /// The Kubernetes pod's UID (with dashes), when the container belongs to a pod.
    pub pod_uid: Option<String>,
}

/// The container of the process whose `/proc/<pid>/cgroup` reads `text`, if it runs in one.
/// The v2 line (`0::PATH`) is read first; in v1 the first hierarchy that names a container.
#[must_use]
pub fn parse(text: &str) -> Option<Container> {
    let paths: Vec<&str> = text
        .lines()
        .filter_map(|l| Some(l.splitn(3, ':').nth(2)?.trim()))
        .collect();
    let v2 = text
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::trim);
    v2.into_iter().chain(paths).find_map(container_of_path)
}

/// The container a cgroup path names (its last segment with a container ID), with the pod
/// of the segments above it.
fn container_of_path(path: &str) -> Option<Container> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (at, (id, runtime)) = segs
        .iter()
        .enumerate()
        .rev()
        .find_map(|(i, s)| Some((i, container_id(s)?)))?;
    let runtime = match runtime {
        Runtime::Unknown if segs[..at].contains(&"docker") => Runtime::Docker,
        r => r,
    };
    let pod_uid = segs[..at].iter().rev().find_map(|s| pod_uid(s));
    Some(Container {
        id,
        runtime,
        pod_uid,
    })
}

/// A segment naming a container: `<prefix>-<64 hex>.scope` or a bare 64-hex ID.
fn container_id(seg: &str) -> Option<(String, Runtime)> {
    let s = seg.strip_suffix(".scope").unwrap_or(seg);
    let (prefix, id) = match s.rsplit_once('-') {
        Some((p, id)) => (Some(p), id),
        None => (None, s),
    };
    if id.len() != 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let runtime = match prefix {
        None => Runtime::Unknown,
        Some("cri-containerd" | "containerd") => Runtime::Containerd,
        Some("crio" | "crio-conmon") => Runtime::CriO,
        Some("docker") => Runtime::Docker,
        Some(_) => return None,
    };
    Some((id.to_ascii_lowercase(), runtime))
}

/// The pod UID of a segment `pod<uid>` or `kubepods-<qos>-pod<uid_with_underscores>.slice`.
fn pod_uid(seg: &str) -> Option<String> {
    let s = seg.strip_suffix(".slice").unwrap_or(seg);
    let at = s.rfind("pod")?;
    // `pod` starts the segment or follows a dash (`kubepods-burstable-pod...`).
    if at > 0 && !s[..at].ends_with('-') {
        return None;
    }
    let uid = s[at + 3..].replace('_', "-");
    let dashes = [8, 13, 18, 23];
    let ok = uid.len() == 36
        && uid.char_indices().all(|(i, c)| {
            if dashes.contains(&i) {
                c == '-'
            } else {
                c.is_ascii_hexdigit()
            }
        });
    ok.then(|| uid.to_ascii_lowercase())
}

/// The container of process `pid` (`/proc/<pid>/cgroup`), if it runs in one.
#[must_use]
pub fn of_pid(pid: u32) -> Option<Container> {
    parse(&std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "4f3c2b1a09e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a29180f7e6d5c4b3a29180";
    const UID: &str = "1b2c3d4e-5f6a-7b8c-9d0e-1f2a3b4c5d6e";

    fn fixture(name: &str) -> String {
        let path = format!(
            "{}/tests/fixtures/cgroup/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    fn pod(runtime: Runtime) -> Container {
        Container {
            id: ID.into(),
            runtime,
            pod_uid: Some(UID.into()),
        }
    }

    #[test]
    fn kubernetes_pods_under_every_runtime_driver_and_cgroup_version() {
        for (file, runtime) in [
            ("v2-containerd-systemd", Runtime::Containerd),
            ("v2-containerd-cgroupfs", Runtime::Unknown),
            ("v2-crio-systemd", Runtime::CriO),
            ("v2-kind-nested", Runtime::Containerd),
            ("v1-containerd-cgroupfs", Runtime::Unknown),
            ("v1-containerd-systemd", Runtime::Containerd),
            ("v1-crio-systemd", Runtime::CriO),
            ("v1-docker-kubernetes", Runtime::Unknown),
            ("v2-guaranteed-containerd", Runtime::Containerd),
        ] {
            assert_eq!(parse(&fixture(file)), Some(pod(runtime)), "{file}");
        }
    }

    #[test]
    fn plain_docker_containers_have_no_pod() {
        for file in ["v1-docker", "v2-docker-systemd"] {
            assert_eq!(
                parse(&fixture(file)),
                Some(Container {
                    id: ID.into(),
                    runtime: Runtime::Docker,
                    pod_uid: None,
                }),
                "{file}"
            );
        }
    }

    #[test]
    fn host_processes_are_in_no_container() {
        for file in ["v2-host-session", "v1-host-systemd"] {
            assert_eq!(parse(&fixture(file)), None, "{file}");
        }
        assert_eq!(parse(""), None);
        assert_eq!(parse("garbage\n0::/pod-not-a-uid/abc"), None);
        // A 64-hex segment with a prefix no runtime uses is not taken for a container.
        assert_eq!(parse(&format!("0::/user.slice/app-{ID}.scope")), None);
    }
}

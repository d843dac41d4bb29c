//! Process identity from procfs.

use std::fs;

/// The short command name of `pid` (`/proc/<pid>/comm`), or `"?"` if it has exited.
#[must_use]
pub fn comm(pid: u32) -> String {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .map_or_else(|_| "?".to_string(), |s| s.trim_end().to_string())
}

/// Whether process `pid` still exists.
#[must_use]
pub fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Thread ids of process `pid`.
#[must_use]
pub fn threads(pid: u32) -> Vec<u32> {
    fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Who a process is: what `/proc` says about it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ProcessInfo {
    /// Host pid.
    pub pid: u32,
    /// pid inside its own PID namespace (the last `NSpid` entry); equals `pid` outside containers.
    pub ns_pid: u32,
    /// Short command name.
    pub comm: String,
    /// Command line, arguments joined by spaces.
    pub cmdline: String,
    /// cgroup path (v2 unified, else the first v1 line).
    pub cgroup: String,
    /// Container id found in the cgroup path (64 hex digits), if any.
    pub container_id: Option<String>,
}

/// Identity of `pid` from procfs; fields it cannot read stay empty.
#[must_use]
pub fn identity(pid: u32) -> ProcessInfo {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let ns_pid = status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .and_then(|v| v.split_whitespace().last()?.parse().ok())
        .unwrap_or(pid);
    let cmdline = fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            String::from_utf8_lossy(&b)
                .split('\0')
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    let cgroups = fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    let cgroup = cgroups
        .lines()
        .find(|l| l.starts_with("0::"))
        .or_else(|| cgroups.lines().next())
        .and_then(|l| l.splitn(3, ':').nth(2))
        .unwrap_or_default()
        .to_string();
    ProcessInfo {
        pid,
        ns_pid,
        comm: comm(pid),
        cmdline,
        container_id: container_id(&cgroup),
        cgroup,
    }
}

/// The 64-hex-digit container id in a cgroup path (docker, containerd, cri-o layouts).
fn container_id(cgroup: &str) -> Option<String> {
    cgroup
        .split(|c: char| !c.is_ascii_hexdigit())
        .find(|part| part.len() == 64)
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_ids_from_cgroup_paths() {
        let id = "a".repeat(64);
        assert_eq!(
            container_id(&format!(
                "/kubepods/besteffort/pod1/cri-containerd-{id}.scope"
            )),
            Some(id.clone())
        );
        assert_eq!(container_id(&format!("/docker/{id}")), Some(id));
        assert_eq!(
            container_id("/user.slice/user-0.slice/session-1.scope"),
            None
        );
    }

    #[test]
    fn identity_of_self() {
        let me = identity(std::process::id());
        assert_eq!(me.pid, std::process::id());
        assert!(!me.comm.is_empty() && !me.cmdline.is_empty());
    }
}

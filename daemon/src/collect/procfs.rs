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

/// On-CPU time of process `pid` so far, all its threads together (those that exited too), ms:
/// `utime + stime` of `/proc/<pid>/stat`, in clock ticks (10 ms at the usual 100 Hz, fine for
/// windows of a second). `None` once the process is gone.
#[must_use]
pub fn cpu_ms(pid: u32) -> Option<f64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_cpu_ticks(&stat).map(|ticks| ticks as f64 * 1000.0 / clock_ticks_per_s())
}

/// On-CPU time of each thread of process `pid` so far, ms, by thread id (`/proc/<pid>/task/
/// <tid>/stat`, as [`cpu_ms`]); empty once the process is gone.
#[must_use]
pub fn thread_cpu_ms(pid: u32) -> Vec<(u32, f64)> {
    threads(pid)
        .into_iter()
        .filter_map(|tid| {
            let stat = fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
            let ticks = parse_cpu_ticks(&stat)?;
            Some((tid, ticks as f64 * 1000.0 / clock_ticks_per_s()))
        })
        .collect()
}

/// The parent of process `pid` (`/proc/<pid>/stat`), `None` once it has exited.
#[must_use]
pub fn ppid(pid: u32) -> Option<u32> {
    parse_ppid(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The parent pid (field 4) of a `/proc/<pid>/stat` line, counted from the name's last `)`.
fn parse_ppid(stat: &str) -> Option<u32> {
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// `utime + stime` from a `/proc/<pid>/stat` line. The command name (field 2) may hold spaces
/// and parentheses, so fields are counted from its last `)`.
fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // After the name: state is field 3, utime field 14, stime field 15.
    let mut f = rest.split_whitespace().skip(11);
    let utime: u64 = f.next()?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    Some(utime + stime)
}

fn clock_ticks_per_s() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 { hz as f64 } else { 100.0 }
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
    fn cpu_ticks_after_a_name_with_spaces_and_parens() {
        let stat = "42 (a) b (c)) S 1 42 42 0 -1 4194560 100 0 0 0 250 40 0 0 20 0 3 0";
        assert_eq!(parse_cpu_ticks(stat), Some(290));
        assert_eq!(parse_ppid(stat), Some(1));
        assert_eq!(
            ppid(std::process::id()),
            Some(std::os::unix::process::parent_id())
        );
        assert_eq!(parse_cpu_ticks("42 (x"), None);
        assert!(cpu_ms(std::process::id()).is_some());
    }

    #[test]
    fn identity_of_self() {
        let me = identity(std::process::id());
        assert_eq!(me.pid, std::process::id());
        assert!(!me.comm.is_empty() && !me.cmdline.is_empty());
    }
}

//! Finding inference-server processes: by listening port, by name, or by a mapped libcuda.

use std::{
    collections::{HashMap, HashSet},
    fs,
};

/// Socket inodes listening on TCP `port` (IPv4 and IPv6) in the network namespace of `pid`,
/// from `/proc/<pid>/net/tcp{,6}`: a server in a pod without `hostNetwork` listens in its own
/// namespace, which the daemon's `/proc/net/tcp` does not show.
fn listening_inodes(pid: u32, port: u16) -> HashSet<u64> {
    let mut out = HashSet::new();
    for file in ["tcp", "tcp6"] {
        if let Ok(text) = fs::read_to_string(format!("/proc/{pid}/net/{file}")) {
            out.extend(parse_listening(&text, port));
        }
    }
    out
}

/// Inodes of LISTEN (`0A`) rows of a `/proc/net/tcp` table whose local port is `port`.
fn parse_listening(text: &str, port: u16) -> Vec<u64> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let local_port = u16::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()?;
            (local_port == port && *f.get(3)? == "0A").then(|| f.get(9)?.parse().ok())?
        })
        .collect()
}

/// Every numeric entry of /proc.
fn all_pids() -> Vec<u32> {
    fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Processes with a socket listening on TCP `port`, in any network namespace. Each
/// namespace's tables are read once (keyed by its `/proc/<pid>/ns/net` link).
#[must_use]
pub fn pids_listening_on(port: u16) -> Vec<u32> {
    let mut by_netns: HashMap<String, HashSet<u64>> = HashMap::new();
    all_pids()
        .into_iter()
        .filter(|&pid| {
            let ns = fs::read_link(format!("/proc/{pid}/ns/net"))
                .map_or_else(|_| format!("pid:{pid}"), |l| l.display().to_string());
            let inodes = by_netns
                .entry(ns)
                .or_insert_with(|| listening_inodes(pid, port));
            !inodes.is_empty() && holds_socket(pid, inodes)
        })
        .collect()
}

/// Whether `pid` has an open file descriptor on one of the socket `inodes`.
fn holds_socket(pid: u32, inodes: &HashSet<u64>) -> bool {
    fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
        fds.flatten().any(|fd| {
            fs::read_link(fd.path())
                .ok()
                .and_then(|l| {
                    l.to_str()?
                        .strip_prefix("socket:[")?
                        .strip_suffix(']')?
                        .parse::<u64>()
                        .ok()
                })
                .is_some_and(|ino| inodes.contains(&ino))
        })
    })
}

/// Processes whose comm or command line contains `name`.
#[must_use]
pub fn pids_named(name: &str) -> Vec<u32> {
    let me = std::process::id();
    all_pids()
        .into_iter()
        .filter(|&pid| pid != me)
        .filter(|pid| {
            let comm = fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            let cmd = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            comm.trim() == name
                || String::from_utf8_lossy(&cmd)
                    .replace('\0', " ")
                    .contains(name)
        })
        .collect()
}

/// Processes that map a `libcuda.so*`: GPU workloads.
#[must_use]
pub fn pids_with_libcuda() -> Vec<u32> {
    all_pids()
        .into_iter()
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|m| m.contains("/libcuda.so"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_listen_rows_only() {
        let t = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0 100 0 0 10 0\n\
   1: 0100007F:1F40 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 4343 1 0 20 4 30 10 -1\n\
   2: 0100007F:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4444 1 0 100 0 0 10 0\n";
        assert_eq!(parse_listening(t, 8000), vec![4242]);
        assert_eq!(parse_listening(t, 80), vec![4444]);
        assert!(parse_listening("garbage\nmore garbage", 80).is_empty());
    }

    #[test]
    fn finds_our_own_listener() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        assert!(pids_listening_on(port).contains(&std::process::id()));
    }
}

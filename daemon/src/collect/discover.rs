//! Finding inference-server processes: by listening port, by name, or by a mapped libcuda;
//! and the addresses a found process listens on, as the daemon can dial them.

use std::{
    collections::{HashMap, HashSet},
    fs,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
};

/// Socket inodes listening on TCP `port` (IPv4 and IPv6) in the network namespace of `pid`,
/// from `/proc/<pid>/net/tcp{,6}`: a server in a pod without `hostNetwork` listens in its own
/// namespace, which the daemon's `/proc/net/tcp` does not show.
fn listening_inodes(pid: u32, port: u16) -> HashSet<u64> {
    listen_rows(pid)
        .into_iter()
        .filter(|r| r.addr.port() == port)
        .map(|r| r.inode)
        .collect()
}

/// The LISTEN rows of `pid`'s network namespace (`/proc/<pid>/net/tcp` and `tcp6`).
fn listen_rows(pid: u32) -> Vec<Listen> {
    let mut rows = Vec::new();
    for (file, v6) in [("tcp", false), ("tcp6", true)] {
        if let Ok(text) = fs::read_to_string(format!("/proc/{pid}/net/{file}")) {
            rows.extend(parse_listen_rows(&text, v6));
        }
    }
    rows
}

/// One LISTEN row of a `/proc/net/tcp{,6}` table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Listen {
    addr: SocketAddr,
    inode: u64,
}

/// The LISTEN rows of a `/proc/net/tcp` (`v6`: `tcp6`) table.
fn parse_listen_rows(text: &str, v6: bool) -> Vec<Listen> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if *f.get(3)? != "0A" {
                return None;
            }
            let (ip, port) = f.get(1)?.split_once(':')?;
            let port = u16::from_str_radix(port, 16).ok()?;
            let ip = if v6 { hex_ipv6(ip)? } else { hex_ipv4(ip)? };
            Some(Listen {
                addr: SocketAddr::new(ip, port),
                inode: f.get(9)?.parse().ok()?,
            })
        })
        .collect()
}

/// `0100007F` (the kernel prints the address as a host-order u32) -> 127.0.0.1.
fn hex_ipv4(h: &str) -> Option<IpAddr> {
    let n = u32::from_str_radix(h, 16).ok()?;
    Some(IpAddr::V4(Ipv4Addr::from(n.to_le_bytes())))
}

/// 32 hex digits, four host-order u32 words -> an IPv6 address.
fn hex_ipv6(h: &str) -> Option<IpAddr> {
    if h.len() != 32 {
        return None;
    }
    let mut b = [0u8; 16];
    for (i, chunk) in b.chunks_mut(4).enumerate() {
        let w = u32::from_str_radix(h.get(i * 8..i * 8 + 8)?, 16).ok()?;
        chunk.copy_from_slice(&w.to_le_bytes());
    }
    Some(IpAddr::V6(Ipv6Addr::from(b)))
}

/// The IPv4 addresses a network namespace holds besides loopback, from its `fib_trie`
/// (`/32 host LOCAL` entries): a pod's own address.
fn parse_local_addrs(fib_trie: &str) -> Vec<Ipv4Addr> {
    let mut out = Vec::new();
    let mut last: Option<Ipv4Addr> = None;
    for line in fib_trie.lines() {
        let t = line.trim_start();
        if let Some(a) = t.strip_prefix("|-- ") {
            last = a.trim().parse().ok();
        } else if t.starts_with("/32 host LOCAL")
            && let Some(a) = last.take()
            && !a.is_loopback()
            && !out.contains(&a)
        {
            out.push(a);
        }
    }
    out
}

/// The TCP addresses `pid` listens on, as the daemon can dial them: a wildcard listener is
/// reached on loopback when the process shares the daemon's network namespace and on its
/// namespace's own address otherwise (a pod without `hostNetwork`); a loopback listener in
/// another namespace cannot be reached and is left out. Sorted, each once.
#[must_use]
pub fn listening_addrs(pid: u32) -> Vec<SocketAddr> {
    let ns = |p: &str| fs::read_link(format!("/proc/{p}/ns/net")).ok();
    let own_netns = ns("self").is_some_and(|me| ns(&pid.to_string()).as_ref() == Some(&me));
    let rows = listen_rows(pid);
    let inodes: HashSet<u64> = rows.iter().map(|r| r.inode).collect();
    let held = held_sockets(pid, &inodes);
    let pod = if own_netns {
        Vec::new()
    } else {
        fs::read_to_string(format!("/proc/{pid}/net/fib_trie"))
            .map(|t| parse_local_addrs(&t))
            .unwrap_or_default()
    };
    let mut out: Vec<SocketAddr> = rows
        .iter()
        .filter(|r| held.contains(&r.inode))
        .flat_map(|r| dialable(r.addr, own_netns, &pod))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The TCP ports `pid` listens on (sockets it holds open), sorted, each once.
#[must_use]
pub fn listening_ports(pid: u32) -> Vec<u16> {
    let rows = listen_rows(pid);
    let held = held_sockets(pid, &rows.iter().map(|r| r.inode).collect());
    let mut ports: Vec<u16> = rows
        .iter()
        .filter(|r| held.contains(&r.inode))
        .map(|r| r.addr.port())
        .collect();
    ports.sort_unstable();
    ports.dedup();
    ports
}

/// The inode of `pid`'s network namespace (`/proc/<pid>/ns/net` reads `net:[INODE]`).
#[must_use]
pub fn netns(pid: &str) -> Option<u64> {
    fs::read_link(format!("/proc/{pid}/ns/net"))
        .ok()?
        .to_str()?
        .strip_prefix("net:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// Where the daemon dials a listener bound to `addr`.
fn dialable(addr: SocketAddr, own_netns: bool, pod: &[Ipv4Addr]) -> Vec<SocketAddr> {
    let port = addr.port();
    let ip = addr.ip().to_canonical();
    if ip.is_unspecified() {
        if own_netns {
            let lo = if addr.is_ipv4() {
                IpAddr::V4(Ipv4Addr::LOCALHOST)
            } else {
                IpAddr::V6(Ipv6Addr::LOCALHOST)
            };
            vec![SocketAddr::new(lo, port)]
        } else {
            pod.iter()
                .map(|a| SocketAddr::new(IpAddr::V4(*a), port))
                .collect()
        }
    } else if ip.is_loopback() && !own_netns {
        Vec::new()
    } else {
        vec![SocketAddr::new(ip, port)]
    }
}

/// Which of `inodes` `pid` holds open.
fn held_sockets(pid: u32, inodes: &HashSet<u64>) -> HashSet<u64> {
    fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|fds| {
            fds.flatten()
                .filter_map(|fd| socket_inode(&fd.path()))
                .filter(|i| inodes.contains(i))
                .collect()
        })
        .unwrap_or_default()
}

/// The inode of a `socket:[N]` descriptor link.
fn socket_inode(fd: &std::path::Path) -> Option<u64> {
    fs::read_link(fd)
        .ok()?
        .to_str()?
        .strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
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
        fds.flatten()
            .any(|fd| socket_inode(&fd.path()).is_some_and(|ino| inodes.contains(&ino)))
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
        let inodes = |port: u16| -> Vec<u64> {
            parse_listen_rows(t, false)
                .iter()
                .filter(|r| r.addr.port() == port)
                .map(|r| r.inode)
                .collect()
        };
        assert_eq!(inodes(8000), vec![4242]);
        assert_eq!(inodes(80), vec![4444]);
        assert!(parse_listen_rows("garbage\nmore garbage", false).is_empty());
    }

    #[test]
    fn finds_our_own_listener() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        assert!(pids_listening_on(port).contains(&std::process::id()));
    }

    #[test]
    fn listen_rows_carry_their_addresses() {
        let v4 = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 00000000:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 11 1 0 100 0 0 10 0\n\
   1: 0100007F:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12 1 0 100 0 0 10 0\n\
   2: 0202000A:1F41 00000000:0000 01 00000000:00000000 00:00000000 00000000     0        0 13 1 0 100 0 0 10 0\n";
        let rows = parse_listen_rows(v4, false);
        assert_eq!(
            rows,
            [
                Listen {
                    addr: "0.0.0.0:8000".parse().unwrap(),
                    inode: 11
                },
                Listen {
                    addr: "127.0.0.1:80".parse().unwrap(),
                    inode: 12
                }
            ]
        );
        let v6 = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 00000000000000000000000001000000:1F40 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 21 1 0 100 0 0 10 0\n\
   1: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 22 1 0 100 0 0 10 0\n";
        let rows = parse_listen_rows(v6, true);
        assert_eq!(rows[0].addr, "[::1]:8000".parse().unwrap());
        assert_eq!(rows[1].addr, "[::]:8080".parse().unwrap());
        assert!(parse_listen_rows("junk\n0: zz:zz 00 0A", false).is_empty());
    }

    #[test]
    fn a_namespace_s_own_address_comes_from_its_fib_trie() {
        let t = "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 0.0.0.0\n        /0 universe UNICAST\n\
     +-- 127.0.0.0/8 2 0 2\n           |-- 127.0.0.1\n              /32 host LOCAL\n\
           |-- 10.244.1.7\n              /32 host LOCAL\n        |-- 10.244.1.255\n           /32 link BROADCAST\n\
Local:\n           |-- 10.244.1.7\n              /32 host LOCAL\n";
        assert_eq!(
            parse_local_addrs(t),
            ["10.244.1.7".parse::<Ipv4Addr>().unwrap()]
        );
    }

    #[test]
    fn wildcard_and_loopback_listeners_are_dialled_where_they_can_be_reached() {
        let pod = ["10.244.1.7".parse().unwrap()];
        let any: SocketAddr = "0.0.0.0:8000".parse().unwrap();
        let lo: SocketAddr = "127.0.0.1:9000".parse().unwrap();
        assert_eq!(
            dialable(any, true, &pod),
            ["127.0.0.1:8000".parse().unwrap()]
        );
        assert_eq!(
            dialable(any, false, &pod),
            ["10.244.1.7:8000".parse().unwrap()]
        );
        assert_eq!(dialable(lo, true, &pod), [lo]);
        assert!(dialable(lo, false, &pod).is_empty());
        assert_eq!(
            dialable("[::]:8080".parse().unwrap(), true, &pod),
            ["[::1]:8080".parse().unwrap()]
        );
    }

    #[test]
    fn our_own_listener_has_a_dialable_address() {
        let l = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
        let port = l.local_addr().unwrap().port();
        assert!(listening_ports(std::process::id()).contains(&port));
        assert_eq!(netns("self"), netns(&std::process::id().to_string()));
        assert!(netns("self").is_some());
        let addrs = listening_addrs(std::process::id());
        assert!(
            addrs.contains(&SocketAddr::from(([127, 0, 0, 1], port))),
            "{addrs:?}"
        );
    }
}

//! TCP probes: connect/accept latency, lifetime and bytes (`sock:inet_sock_set_state`),
//! retransmits (`tcp:tcp_retransmit_skb`), and server-side request timing of watched processes
//! (`sock:sock_recv_length`/`sock_send_length`); smoothed RTT and cwnd are read from the
//! `tcp_sock` at BTF offsets (see `probe-ebpf/src/sockets.rs`).
//!
//! The two hooks that fire on every socket call are attached as raw tracepoints when they can
//! be (`raw:sock_recv_length`, `raw:sock_send_length`): no perf record is filled for the node's
//! unwatched traffic. Each falls back to its classic tracepoint on its own. Without the
//! `tcp_sock` offsets the family still runs, without RTT, cwnd and lifetime bytes.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    path::Path,
};

use aya::maps::{HashMap, MapData};
use probe_common::sockets::{self as so, Conn, SockEvent, Tuple, globals};

use super::{
    Global, ProbeError, Probes,
    btf::{Btf, BtfError},
    reader::Reader,
    tracefs::Format,
};

/// Counters of what the socket programs could not record; they only grow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Drops {
    /// Events lost because the ring buffer was full.
    pub ringbuf_full: u64,
    /// Connections not tracked because the connection map was full.
    pub conns_full: u64,
}

pub(crate) fn globals(tracefs: &Path) -> Result<Vec<Global>, ProbeError> {
    let st = Format::read(tracefs, "sock", "inet_sock_set_state")?;
    let mut g = Vec::new();
    let fields = [
        ("skaddr", 8),
        ("oldstate", 4),
        ("newstate", 4),
        ("sport", 2),
        ("dport", 2),
        ("family", 2),
        ("protocol", 2),
        ("saddr", 4),
        ("daddr", 4),
        ("saddr_v6", 16),
        ("daddr_v6", 16),
    ];
    for (name, (field, size)) in globals::STATE.iter().zip(fields) {
        g.push((*name, u64::from(st.offset(field, size)?), 4));
    }
    for (name, sym) in globals::TCP_STATES.iter().zip(globals::TCP_STATES) {
        g.push((*name, st.print_symbol(sym)?, 4));
    }
    g.push((globals::IPPROTO_TCP, st.print_symbol("IPPROTO_TCP")?, 4));
    // The remaining hooks are optional: a kernel without them keeps zero offsets and the
    // hook's attach is reported as failed.
    if let Ok(rt) = Format::read(tracefs, "tcp", "tcp_retransmit_skb")
        && let Ok(off) = rt.offset("skaddr", 8)
    {
        g.push((globals::RETRANS_SKADDR, u64::from(off), 4));
    }
    if let Ok(sl) = Format::read(tracefs, "sock", "sock_send_length") {
        let fields = [("sk", 8), ("ret", 4), ("flags", 4)];
        for (name, (field, size)) in globals::LENGTH.iter().zip(fields) {
            if let Ok(off) = sl.offset(field, size) {
                g.push((*name, u64::from(off), 4));
            }
        }
    }
    Ok(g)
}

/// Byte offsets of the `tcp_sock` fields the programs read, from this kernel's BTF, and the
/// flag that lets them read. An error leaves the flag off (no RTT, cwnd or lifetime bytes).
pub(crate) fn tcp_sock_globals(btf: &Btf) -> Result<Vec<Global>, BtfError> {
    let mut out = Vec::new();
    let members = [
        ("srtt_us", 4),
        ("snd_cwnd", 4),
        ("bytes_received", 8),
        ("bytes_sent", 8),
    ];
    for (global, (member, size)) in globals::TCP_SOCK.iter().zip(members) {
        let offset = btf.sized_member("tcp_sock", member, size)?;
        out.push((*global, u64::from(offset), 4));
    }
    out.push((globals::TCP_SOCK_OK, 1, 4));
    Ok(out)
}

/// Raw-tracepoint twins: (classic program, raw program).
const RAW_TWINS: [(&str, &str); 2] = [
    ("sock_recv", "sock_recv_raw"),
    ("sock_send", "sock_send_raw"),
];

/// Attaches each socket hook; failures are recorded per hook. `inet_sock_set_state` is the
/// one the others build on.
pub(crate) fn attach(probes: &mut Probes) {
    let tracefs = super::tracefs::ensure_mounted().ok();
    let has = |cat: &str, name: &str, field: &str| {
        tracefs
            .as_deref()
            .is_some_and(|t| Format::read(t, cat, name).is_ok_and(|f| f.field(field).is_ok()))
    };
    for (prog, cat, name, needs) in [
        ("sock_state", "sock", "inet_sock_set_state", "skaddr"),
        ("tcp_retransmit", "tcp", "tcp_retransmit_skb", "skaddr"),
        ("sock_recv", "sock", "sock_recv_length", "sk"),
        ("sock_send", "sock", "sock_send_length", "sk"),
    ] {
        if let Some(&(_, raw)) = RAW_TWINS.iter().find(|(c, _)| *c == prog) {
            match probes.attach_raw_tracepoint(raw, name) {
                Ok(()) => continue,
                Err(e) => {
                    tracing::info!("{e}; using the classic tracepoint {cat}:{name}");
                    probes.unload(raw);
                    probes.forget_hook(&format!("raw:{name}"));
                }
            }
        }
        if has(cat, name, needs) {
            let _ = probes.attach_tracepoint(prog, cat, name);
        } else {
            let err = ProbeError::MissingField {
                event: format!("{cat}:{name}"),
                field: needs.into(),
            };
            probes.record(format!("{cat}:{name}"), Some(&err));
        }
    }
}

impl Probes {
    /// Starts the reader of socket events (once; `None` afterwards). Needs a tokio runtime.
    pub fn sock_events(
        &mut self,
        capacity: usize,
    ) -> Result<Option<Reader<SockEvent>>, ProbeError> {
        self.events(so::MAP_EVENTS, capacity)
    }

    /// Live tracked connections: kernel socket address -> state.
    pub fn sock_conns(&self) -> Result<Vec<(u64, Conn)>, ProbeError> {
        let err = |e| ProbeError::ebpf("reading tracked connections", e);
        let conns: HashMap<&MapData, u64, Conn> =
            HashMap::try_from(self.map(so::MAP_CONNS)).map_err(err)?;
        Ok(conns.iter().filter_map(Result::ok).collect())
    }

    /// What the socket programs could not record, summed over CPUs.
    pub fn sock_drops(&self) -> Result<Drops, ProbeError> {
        Ok(Drops {
            ringbuf_full: self.drop_kind_sum(
                so::MAP_DROPS,
                so::DROP_RINGBUF,
                so::DROP_KINDS,
                so::HOOKS,
            )?,
            conns_full: self.drop_kind_sum(
                so::MAP_DROPS,
                so::DROP_CONNS_FULL,
                so::DROP_KINDS,
                so::HOOKS,
            )?,
        })
    }
}

/// Local and remote socket addresses of a tuple; `None` when the family is unknown.
#[must_use]
pub fn endpoints(t: &Tuple) -> Option<(SocketAddr, SocketAddr)> {
    let ip = |b: &[u8; 16]| -> Option<IpAddr> {
        match t.family {
            2 => Some(IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]))),
            10 => Some(IpAddr::V6(Ipv6Addr::from(*b))),
            _ => None,
        }
    };
    Some((
        SocketAddr::new(ip(&t.saddr)?, t.sport),
        SocketAddr::new(ip(&t.daddr)?, t.dport),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_sock_offsets_from_this_kernels_btf() {
        let Ok(btf) = Btf::from_file(super::super::btf::VMLINUX) else {
            println!("skipped: BTF not readable");
            return;
        };
        let g = tcp_sock_globals(&btf).unwrap();
        let names: Vec<&str> = g.iter().map(|&(n, _, _)| n).collect();
        assert_eq!(names[..4], globals::TCP_SOCK);
        assert_eq!(g[4], (globals::TCP_SOCK_OK, 1, 4));
        // All live past the embedded `struct sock` (hundreds of bytes in).
        assert!(g[..4].iter().all(|&(_, off, _)| off > 256), "{g:?}");
    }

    #[test]
    fn endpoints_decode_v4_and_v6() {
        let mut t = Tuple {
            sport: 8000,
            dport: 51000,
            family: 2,
            ..Tuple::default()
        };
        t.saddr[..4].copy_from_slice(&[127, 0, 0, 1]);
        t.daddr[..4].copy_from_slice(&[10, 0, 0, 2]);
        let (l, r) = endpoints(&t).unwrap();
        assert_eq!(l.to_string(), "127.0.0.1:8000");
        assert_eq!(r.to_string(), "10.0.0.2:51000");
        t.family = 10;
        t.saddr = Ipv6Addr::LOCALHOST.octets();
        assert_eq!(endpoints(&t).unwrap().0.to_string(), "[::1]:8000");
        t.family = 0;
        assert_eq!(endpoints(&t), None);
    }
}

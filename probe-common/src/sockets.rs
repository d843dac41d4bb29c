//! TCP connections and server-side request timing, from `sock:inet_sock_set_state`,
//! `tcp:tcp_retransmit_skb`, `sock:sock_recv_length` and `sock:sock_send_length`, plus
//! `tcp_sock` fields read at BTF offsets.

use crate::assert_size;

/// Ring buffer of [`SockEvent`]s.
pub const MAP_EVENTS: &str = "SOCK_EVENTS";
/// `skaddr -> Conn`: live TCP connections.
pub const MAP_CONNS: &str = "SOCK_CONNS";
/// Per-CPU `u64` counters of what could not be recorded, per hook: slot
/// [`crate::drop_slot`]`(HOOK_*, DROP_*, DROP_KINDS)`.
pub const MAP_DROPS: &str = "SOCK_DROPS";

/// `sock:inet_sock_set_state`.
pub const HOOK_STATE: u32 = 0;
/// `tcp:tcp_retransmit_skb`.
pub const HOOK_RETRANSMIT: u32 = 1;
/// `sock:sock_recv_length` (classic or raw tracepoint).
pub const HOOK_RECV: u32 = 2;
/// `sock:sock_send_length` (classic or raw tracepoint).
pub const HOOK_SEND: u32 = 3;
/// Number of hooks; [`HOOK_NAMES`] names each.
pub const HOOKS: u32 = 4;
/// Each hook's name, by `HOOK_*`.
pub const HOOK_NAMES: [&str; HOOKS as usize] = [
    "sock:inet_sock_set_state",
    "tcp:tcp_retransmit_skb",
    "sock:sock_recv_length",
    "sock:sock_send_length",
];

/// The ring buffer was full: an event was lost.
pub const DROP_RINGBUF: u32 = 0;
/// [`MAP_CONNS`] was full: a connection is not tracked.
pub const DROP_CONNS_FULL: u32 = 1;
/// Number of drop counters per hook.
pub const DROP_KINDS: u32 = 2;
/// Each drop counter's name, by `DROP_*`.
pub const DROP_NAMES: [&str; DROP_KINDS as usize] = ["ringbuf_full", "conns_full"];
/// Every `(HOOK_*, DROP_*)` pair a program can count: what userspace exports (the send hook
/// neither emits nor inserts, so it loses nothing).
pub const LOSSES: [(u32, u32); 4] = [
    (HOOK_STATE, DROP_RINGBUF),
    (HOOK_STATE, DROP_CONNS_FULL),
    (HOOK_RETRANSMIT, DROP_RINGBUF),
    (HOOK_RECV, DROP_RINGBUF),
];

/// Capacity of [`MAP_CONNS`].
pub const CONN_ENTRIES: u32 = 32_768;
/// Size of [`MAP_EVENTS`] in bytes.
pub const EVENTS_BYTES: u32 = 1 << 20;

/// An outgoing connection reached ESTABLISHED: `duration_ns` is the connect latency.
pub const EV_CONNECT: u32 = 1;
/// An incoming connection reached ESTABLISHED: `duration_ns` is `SYN_RECV` -> ESTABLISHED.
pub const EV_ACCEPT: u32 = 2;
/// A connection closed: `duration_ns` is its lifetime; bytes and RTT cover all of it.
pub const EV_CLOSE: u32 = 3;
/// A watched process answered a request on this connection (the `req` fields).
pub const EV_REQUEST: u32 = 4;
/// A connection of a watched process retransmitted a segment (`ts_ns` is when).
pub const EV_RETRANS: u32 = 5;

/// What a [`SockEvent`] reports: its `kind`, decoded once on the user side.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SockEventKind {
    /// [`EV_CONNECT`].
    Connect = EV_CONNECT,
    /// [`EV_ACCEPT`].
    Accept = EV_ACCEPT,
    /// [`EV_CLOSE`].
    Close = EV_CLOSE,
    /// [`EV_REQUEST`].
    Request = EV_REQUEST,
    /// [`EV_RETRANS`].
    Retrans = EV_RETRANS,
}

impl SockEventKind {
    /// The kind of an event's `kind` field; `None` for a value this build does not know.
    #[must_use]
    pub fn decode(kind: u32) -> Option<Self> {
        Some(match kind {
            EV_CONNECT => Self::Connect,
            EV_ACCEPT => Self::Accept,
            EV_CLOSE => Self::Close,
            EV_REQUEST => Self::Request,
            EV_RETRANS => Self::Retrans,
            _ => return None,
        })
    }
}

/// Request phases of a connection owned by a watched process.
pub const PHASE_IDLE: u32 = 0;
/// Request bytes are arriving.
pub const PHASE_RECEIVING: u32 = 1;
/// Response bytes are leaving.
pub const PHASE_RESPONDING: u32 = 2;

/// Names of the globals userspace fills from the tracepoint format files.
pub mod globals {
    /// `inet_sock_set_state` offsets: skaddr, oldstate, newstate, sport, dport, family,
    /// protocol, saddr, daddr, `saddr_v6`, `daddr_v6`.
    pub const STATE: [&str; 11] = [
        "SS_SKADDR",
        "SS_OLDSTATE",
        "SS_NEWSTATE",
        "SS_SPORT",
        "SS_DPORT",
        "SS_FAMILY",
        "SS_PROTOCOL",
        "SS_SADDR",
        "SS_DADDR",
        "SS_SADDR6",
        "SS_DADDR6",
    ];
    /// `IPPROTO_TCP`, from the format's `__print_symbolic` table.
    pub const IPPROTO_TCP: &str = "IPPROTO_TCP";
    /// `tcp_retransmit_skb` offset of skaddr.
    pub const RETRANS_SKADDR: &str = "RT_SKADDR";
    /// `sock_{send,recv}_length` offsets: sk, ret, flags.
    pub const LENGTH: [&str; 3] = ["SL_SK", "SL_RET", "SL_FLAGS"];
    /// Byte offsets in `struct tcp_sock` (from BTF) of `srtt_us` and `snd_cwnd` (u32s),
    /// `bytes_received` and `bytes_sent` (u64s).
    pub const TCP_SOCK: [&str; 4] = [
        "TCP_SRTT_US_OFF",
        "TCP_SND_CWND_OFF",
        "TCP_BYTES_RECEIVED_OFF",
        "TCP_BYTES_SENT_OFF",
    ];
    /// 1 when the [`TCP_SOCK`] offsets are set; the programs read nothing from a `tcp_sock`
    /// otherwise.
    pub const TCP_SOCK_OK: &str = "TCP_SOCK_OK";
    /// TCP state numbers, from the format's `__print_symbolic` table:
    /// ESTABLISHED, `SYN_SENT`, `SYN_RECV`, CLOSE.
    pub const TCP_STATES: [&str; 4] = [
        "TCP_ESTABLISHED",
        "TCP_SYN_SENT",
        "TCP_SYN_RECV",
        "TCP_CLOSE",
    ];
}

/// A connection's addresses; IPv4 addresses use the first 4 bytes. Ports in host order.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Tuple {
    /// Local (source) address, network byte order.
    pub saddr: [u8; 16],
    /// Remote (destination) address, network byte order.
    pub daddr: [u8; 16],
    /// Local port.
    pub sport: u16,
    /// Remote port.
    pub dport: u16,
    /// `AF_INET` (2) or `AF_INET6` (10); 0 when unknown (connection older than the probe).
    pub family: u16,
    /// Explicit padding.
    pub pad: u16,
}
assert_size!(Tuple, 40);

/// One request/response exchange seen on a connection of a watched process (server side).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Exchange {
    /// First request byte read (ktime ns).
    pub req_in_ns: u64,
    /// Last request byte read before the response began.
    pub req_last_ns: u64,
    /// First response write.
    pub first_out_ns: u64,
    /// Second response write (first token after headers, for streamed responses); 0 if none.
    pub second_out_ns: u64,
    /// Last response write so far.
    pub last_out_ns: u64,
    /// Largest gap between two response writes.
    pub max_gap_ns: u64,
    /// The write that ended that gap (its time); 0 until a second write.
    pub max_gap_end_ns: u64,
    /// Request bytes read.
    pub bytes_in: u64,
    /// Response bytes written.
    pub bytes_out: u64,
    /// Response writes.
    pub writes: u32,
    /// `PHASE_*`.
    pub phase: u32,
    /// The connection's retransmit count when the request began: retransmits during the
    /// exchange are the event's `conn.retrans` minus this.
    pub retrans_start: u32,
    /// Explicit padding.
    pub pad: u32,
}
assert_size!(Exchange, 88);

/// [`Conn::role`] of a connection this side connected (a client, or a server calling out).
pub const ROLE_CLIENT: u32 = 1;
/// [`Conn::role`] of a connection this side accepted (a server).
pub const ROLE_SERVER: u32 = 2;

/// A tracked TCP connection (value of [`MAP_CONNS`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Conn {
    /// Addresses.
    pub tuple: Tuple,
    /// Process that owns it, when seen in process context; 0 until then.
    pub tgid: u32,
    /// [`ROLE_CLIENT`], [`ROLE_SERVER`], or 0 when first seen established (unknown).
    pub role: u32,
    /// `SYN_SENT` / `SYN_RECV` time, or when first seen (ktime ns).
    pub start_ns: u64,
    /// ESTABLISHED time; 0 before.
    pub established_ns: u64,
    /// Data bytes received (`tcp_sock.bytes_received`, read at close, as bcc's tcplife; the
    /// peer's FIN counts one); 0 while the connection lives.
    pub bytes_in: u64,
    /// Data bytes sent (`tcp_sock.bytes_sent`, read at close; retransmitted bytes count again).
    pub bytes_out: u64,
    /// Smoothed-RTT readings: one per send/recv of a watched process, one at close.
    pub rtt_samples: u64,
    /// Sum of smoothed RTTs over the samples, µs.
    pub srtt_sum_us: u64,
    /// Latest smoothed RTT, µs.
    pub srtt_last_us: u32,
    /// Largest smoothed RTT seen, µs.
    pub srtt_max_us: u32,
    /// Latest congestion window, segments.
    pub cwnd_last: u32,
    /// Retransmitted segments.
    pub retrans: u32,
    /// The request in progress (watched processes only).
    pub exchange: Exchange,
}
assert_size!(Conn, 40 + 8 + 48 + 16 + 88);

/// What the kernel reports through [`MAP_EVENTS`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SockEvent {
    /// `EV_*`.
    pub kind: u32,
    /// Owning process (0 unknown).
    pub tgid: u32,
    /// When it happened (ktime ns).
    pub ts_ns: u64,
    /// Kernel socket address: the connection's identity while it lives.
    pub skaddr: u64,
    /// Connect latency, accept latency or lifetime, by kind.
    pub duration_ns: u64,
    /// The connection's state at the event.
    pub conn: Conn,
}
assert_size!(SockEvent, 32 + 200);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), Copy, explicit padding, every bit pattern valid.
    unsafe impl aya::Pod for super::Conn {}
    unsafe impl aya::Pod for super::SockEvent {}
}

//! TCP connections (connect/accept latency, lifetime, bytes, smoothed RTT, retransmits) and
//! server-side request timing of watched processes.
//!
//! Every TCP connection on the node is tracked from its state changes alone (rare events):
//! at close its bytes, smoothed RTT and cwnd are read from the `tcp_sock` (bcc tcplife's way).
//! Per-call work is for watched processes only: `sock_{recv,send}_length` look at the calling
//! process first, so the node's other traffic costs one early return, and a watched process's
//! calls sample the smoothed RTT and cwnd of the socket (the values `tcp:tcp_probe` reports,
//! without a program on every segment of every connection). The per-call hooks have raw
//! tracepoint twins, preferred by userspace: a classic tracepoint makes the kernel fill a perf
//! record on every hit, watched or not.
//!
//! A connection is keyed by its kernel socket address while it lives. `inet_sock_set_state`
//! creates and closes entries; `tcp_retransmit_skb` counts retransmits; for watched processes,
//! `sock_recv_length` / `sock_send_length` (process context) run a request -> response state
//! machine: the first read after a response starts a new exchange, the first write after reads
//! is the server's first byte.

use aya_ebpf::{
    helpers::{bpf_ktime_get_ns, bpf_probe_read_kernel},
    macros::{map, raw_tracepoint, tracepoint},
    maps::{HashMap, PerCpuArray, RingBuf},
    programs::{RawTracePointContext, TracePointContext},
};
use probe_common::drop_slot;
use probe_common::sockets::{
    CONN_ENTRIES, Conn, DROP_CONNS_FULL, DROP_KINDS, DROP_RINGBUF, EV_ACCEPT, EV_CLOSE, EV_CONNECT,
    EV_REQUEST, EV_RETRANS, EVENTS_BYTES, Exchange, HOOK_RECV, HOOK_RETRANSMIT, HOOK_STATE, HOOKS,
    PHASE_IDLE, PHASE_RECEIVING, PHASE_RESPONDING, ROLE_CLIENT, ROLE_SERVER, SockEvent, Tuple,
};

use crate::watch::{count_drop, current, global, list_on, submit_flags, watched, watched_fast};

macro_rules! offsets {
    ($($name:ident),*) => { $( #[unsafe(no_mangle)] static $name: u32 = 0; )* };
}
offsets!(
    SS_SKADDR,
    SS_OLDSTATE,
    SS_NEWSTATE,
    SS_SPORT,
    SS_DPORT,
    SS_FAMILY,
    SS_PROTOCOL,
    SS_SADDR,
    SS_DADDR,
    SS_SADDR6,
    SS_DADDR6,
    TP_SKADDR,
    TP_SRTT,
    TP_CWND,
    RT_SKADDR,
    SL_SK,
    SL_RET,
    SL_FLAGS,
    TCP_SRTT_US_OFF,
    TCP_SND_CWND_OFF,
    TCP_BYTES_RECEIVED_OFF,
    TCP_BYTES_SENT_OFF,
    TCP_SOCK_OK
);
#[unsafe(no_mangle)]
static TCP_ESTABLISHED: u32 = 1;
#[unsafe(no_mangle)]
static TCP_SYN_SENT: u32 = 2;
#[unsafe(no_mangle)]
static TCP_SYN_RECV: u32 = 3;
#[unsafe(no_mangle)]
static TCP_CLOSE: u32 = 7;
#[unsafe(no_mangle)]
static IPPROTO_TCP: u32 = 6;

const AF_INET6: u16 = 10;
const MSG_PEEK: i32 = 2;

#[map]
static SOCK_CONNS: HashMap<u64, Conn> = HashMap::with_max_entries(CONN_ENTRIES, 0);
#[map]
static SOCK_EVENTS: RingBuf = RingBuf::with_byte_size(EVENTS_BYTES, 0);
#[map]
static SOCK_DROPS: PerCpuArray<u64> = PerCpuArray::with_max_entries(HOOKS * DROP_KINDS, 0);
/// Per-CPU scratch space for building a `Conn`: it is too large for the 512-byte BPF stack
/// next to everything else.
#[map]
static SOCK_SCRATCH: PerCpuArray<Conn> = PerCpuArray::with_max_entries(1, 0);

#[inline(always)]
fn at<T>(ctx: &TracePointContext, off: &'static u32) -> Result<T, i32> {
    // SAFETY: the offset comes from this kernel's format file for this event.
    unsafe { ctx.read_at::<T>(global(off) as usize) }
}

/// Copies `conn` (a map value) straight into a ring-buffer record: no stack copy. A full ring
/// is counted against `hook`, the program that lost the record.
#[inline(always)]
fn emit(hook: u32, kind: u32, ts_ns: u64, skaddr: u64, duration_ns: u64, conn: *const Conn) {
    match SOCK_EVENTS.reserve::<SockEvent>(0) {
        Some(mut slot) => {
            let ev = slot.as_mut_ptr();
            // SAFETY: `ev` is a reserved record of the right size; `conn` a live map value.
            unsafe {
                (*ev).kind = kind;
                (*ev).tgid = (*conn).tgid;
                (*ev).ts_ns = ts_ns;
                (*ev).skaddr = skaddr;
                (*ev).duration_ns = duration_ns;
                core::ptr::copy_nonoverlapping(conn, &raw mut (*ev).conn, 1);
            }
            slot.submit(submit_flags(&SOCK_EVENTS, EVENTS_BYTES));
        }
        None => count_drop(&SOCK_DROPS, drop_slot(hook, DROP_RINGBUF, DROP_KINDS)),
    }
}

/// Starts tracking `sk`: fills the per-CPU scratch `Conn` and inserts it.
#[inline(always)]
fn track(
    ctx: &TracePointContext,
    sk: u64,
    tgid: u32,
    role: u32,
    now: u64,
    established: bool,
) -> Result<(), i32> {
    let conn = SOCK_SCRATCH.get_ptr_mut(0).ok_or(0)?;
    // SAFETY: per-CPU scratch slot, fully overwritten before use.
    unsafe {
        core::ptr::write_bytes(conn, 0, 1);
        fill_tuple(ctx, &raw mut (*conn).tuple)?;
        (*conn).tgid = tgid;
        (*conn).role = role;
        (*conn).start_ns = now;
        if established {
            (*conn).established_ns = now;
        }
        if SOCK_CONNS.insert(&sk, &*conn, 0).is_err() {
            count_drop(
                &SOCK_DROPS,
                drop_slot(HOOK_STATE, DROP_CONNS_FULL, DROP_KINDS),
            );
        }
    }
    Ok(())
}

#[tracepoint]
pub fn sock_state(ctx: TracePointContext) -> u32 {
    match try_state(&ctx) {
        Ok(()) | Err(_) => 0,
    }
}

/// Writes the event's addresses into `t` (map memory).
#[inline(always)]
unsafe fn fill_tuple(ctx: &TracePointContext, t: *mut Tuple) -> Result<(), i32> {
    let family: u16 = at(ctx, &SS_FAMILY)?;
    // SAFETY: the caller passes a pointer into a live map value.
    unsafe {
        (*t).family = family;
        (*t).sport = at(ctx, &SS_SPORT)?;
        (*t).dport = at(ctx, &SS_DPORT)?;
        if family == AF_INET6 {
            (*t).saddr = at(ctx, &SS_SADDR6)?;
            (*t).daddr = at(ctx, &SS_DADDR6)?;
        } else {
            let s: u32 = at(ctx, &SS_SADDR)?;
            let d: u32 = at(ctx, &SS_DADDR)?;
            (*t).saddr = [0; 16];
            (*t).daddr = [0; 16];
            core::ptr::write_unaligned((&raw mut (*t).saddr).cast::<u32>(), s);
            core::ptr::write_unaligned((&raw mut (*t).daddr).cast::<u32>(), d);
        }
    }
    Ok(())
}

/// A closing connection's totals from its `tcp_sock`: data bytes received and sent (bcc
/// tcplife reads the same counters) and a last RTT/cwnd reading.
#[inline(always)]
fn lifetime_totals(sk: u64, conn: *mut Conn) -> Result<(), i32> {
    if global(&TCP_SOCK_OK) == 0 {
        return Ok(());
    }
    let base = sk as *const u8;
    // SAFETY: bpf_probe_read_kernel checks the address; offsets come from this kernel's BTF.
    unsafe {
        (*conn).bytes_in = bpf_probe_read_kernel(
            base.wrapping_add(global(&TCP_BYTES_RECEIVED_OFF) as usize)
                .cast(),
        )?;
        (*conn).bytes_out = bpf_probe_read_kernel(
            base.wrapping_add(global(&TCP_BYTES_SENT_OFF) as usize)
                .cast(),
        )?;
    }
    sample_tcp(sk, conn)
}

fn try_state(ctx: &TracePointContext) -> Result<(), i32> {
    let protocol: u16 = at(ctx, &SS_PROTOCOL)?;
    if u32::from(protocol) != global(&IPPROTO_TCP) {
        return Ok(());
    }
    let sk: u64 = at(ctx, &SS_SKADDR)?;
    let old: i32 = at(ctx, &SS_OLDSTATE)?;
    let new: i32 = at(ctx, &SS_NEWSTATE)?;
    let (old, new) = (old as u32, new as u32);
    let now = unsafe { bpf_ktime_get_ns() };

    if new == global(&TCP_SYN_SENT) {
        // connect() runs in the caller's context: the owner is current.
        track(ctx, sk, current().0, ROLE_CLIENT, now, false)?;
    } else if new == global(&TCP_SYN_RECV) {
        track(ctx, sk, 0, ROLE_SERVER, now, false)?;
    } else if new == global(&TCP_ESTABLISHED) {
        let Some(conn) = SOCK_CONNS.get_ptr_mut(&sk) else {
            // This socket's handshake predates the probe, or the map was full.
            return track(ctx, sk, 0, 0, now, true);
        };
        // SAFETY: a live map value; only this event writes these fields.
        unsafe {
            // The tuple is final only now: connect() sets SYN_SENT before it picks the source
            // port, and a passive socket starts with its listener's addresses.
            fill_tuple(ctx, &raw mut (*conn).tuple)?;
            (*conn).established_ns = now;
            let took = now - (*conn).start_ns;
            if old == global(&TCP_SYN_SENT) {
                emit(HOOK_STATE, EV_CONNECT, now, sk, took, conn);
            } else if old == global(&TCP_SYN_RECV) {
                emit(HOOK_STATE, EV_ACCEPT, now, sk, took, conn);
            }
        }
    } else if new == global(&TCP_CLOSE) {
        if let Some(conn) = SOCK_CONNS.get_ptr_mut(&sk) {
            let _ = lifetime_totals(sk, conn);
            // SAFETY: a live map value, removed only after both emits.
            unsafe {
                if (*conn).exchange.phase == PHASE_RESPONDING {
                    emit(HOOK_STATE, EV_REQUEST, now, sk, 0, conn);
                }
                emit(HOOK_STATE, EV_CLOSE, now, sk, now - (*conn).start_ns, conn);
            }
            let _ = SOCK_CONNS.remove(&sk);
        }
    }
    Ok(())
}

/// Reads the socket's smoothed RTT (µs) and cwnd into `conn`, when BTF gave the offsets.
#[inline(always)]
fn sample_tcp(sk: u64, conn: *mut Conn) -> Result<(), i32> {
    if global(&TCP_SOCK_OK) == 0 {
        return Ok(());
    }
    let base = sk as *const u8;
    // SAFETY: bpf_probe_read_kernel checks the address; offsets come from this kernel's BTF.
    let (srtt_x8, cwnd): (u32, u32) = unsafe {
        (
            bpf_probe_read_kernel(base.wrapping_add(global(&TCP_SRTT_US_OFF) as usize).cast())?,
            bpf_probe_read_kernel(base.wrapping_add(global(&TCP_SND_CWND_OFF) as usize).cast())?,
        )
    };
    // The kernel keeps `srtt_us` scaled by 8 (tcp_probe reports `srtt_us >> 3` too).
    rtt_sample(conn, srtt_x8 >> 3, cwnd);
    Ok(())
}

/// Adds one smoothed-RTT (µs) and cwnd reading to a tracked connection.
#[inline(always)]
fn rtt_sample(conn: *mut Conn, srtt: u32, cwnd: u32) {
    // SAFETY: `conn` points into a live map value; a socket's calls hold its lock.
    unsafe {
        (*conn).rtt_samples += 1;
        (*conn).srtt_sum_us += u64::from(srtt);
        (*conn).srtt_last_us = srtt;
        if srtt > (*conn).srtt_max_us {
            (*conn).srtt_max_us = srtt;
        }
        (*conn).cwnd_last = cwnd;
    }
}

#[tracepoint]
pub fn tcp_retransmit(ctx: TracePointContext) -> u32 {
    match try_retransmit(&ctx) {
        Ok(()) | Err(_) => 0,
    }
}

fn try_retransmit(ctx: &TracePointContext) -> Result<(), i32> {
    let sk: u64 = at(ctx, &RT_SKADDR)?;
    if let Some(conn) = SOCK_CONNS.get_ptr_mut(&sk) {
        // SAFETY: live map value.
        let tgid = unsafe {
            (*conn).retrans += 1;
            (*conn).tgid
        };
        // Retransmits are rare: each one of a watched process is an event, so userspace can
        // join it with the request it delayed (by the connection and the time).
        if tgid != 0 && watched(tgid) {
            emit(
                HOOK_RETRANSMIT,
                EV_RETRANS,
                unsafe { bpf_ktime_get_ns() },
                sk,
                0,
                conn,
            );
        }
    }
    Ok(())
}

/// The connection of a watched process's send/recv of `ret` bytes on socket `sk`, if tracked
/// (only TCP sockets are), with a fresh RTT/cwnd sample. Anything else returns before any
/// lookup: this runs for every socket call on the node. Peeks and failures are skipped.
#[inline(always)]
fn length_event(sk: u64, ret: i32, flags: i32) -> Option<*mut Conn> {
    let tgid = current().0;
    if !watched_fast(tgid) || ret <= 0 || flags & MSG_PEEK != 0 {
        return None;
    }
    let conn = SOCK_CONNS.get_ptr_mut(&sk)?;
    // SAFETY: `conn` points into a live map value.
    unsafe {
        if (*conn).tgid == 0 {
            (*conn).tgid = tgid;
        }
    }
    let _ = sample_tcp(sk, conn);
    Some(conn)
}

/// `(sk, ret, flags)` of a classic `sock_{recv,send}_length` record.
#[inline(always)]
fn length_fields(ctx: &TracePointContext) -> Result<(u64, i32, i32), i32> {
    Ok((at(ctx, &SL_SK)?, at(ctx, &SL_RET)?, at(ctx, &SL_FLAGS)?))
}

/// `(sk, ret, flags)` of a raw `sock_{recv,send}_length(struct sock *sk, int ret, int flags)`.
#[inline(always)]
fn length_args(ctx: &RawTracePointContext) -> (u64, i32, i32) {
    (
        ctx.arg::<u64>(0),
        ctx.arg::<u64>(1) as i32,
        ctx.arg::<u64>(2) as i32,
    )
}

#[tracepoint]
pub fn sock_recv(ctx: TracePointContext) -> u32 {
    match length_fields(&ctx) {
        Ok((sk, ret, flags)) => on_recv(sk, ret, flags),
        Err(_) => 0,
    }
}

#[raw_tracepoint(tracepoint = "sock_recv_length")]
pub fn sock_recv_raw(ctx: RawTracePointContext) -> u32 {
    let (sk, ret, flags) = length_args(&ctx);
    on_recv(sk, ret, flags)
}

#[inline(always)]
fn on_recv(sk: u64, ret: i32, flags: i32) -> u32 {
    let Some(conn) = length_event(sk, ret, flags) else {
        return 0;
    };
    let n = ret as u64;
    // SAFETY: live map value; the owning process's reads and writes are serialised by the
    // socket lock, so the exchange is updated by one CPU at a time.
    let conn = unsafe { &mut *conn };
    if !list_on() {
        return 0;
    }
    let now = unsafe { bpf_ktime_get_ns() };
    let ex = &mut conn.exchange;
    if ex.phase == PHASE_RESPONDING {
        // A new request on a kept-alive connection: the previous exchange is complete.
        emit(HOOK_RECV, EV_REQUEST, now, sk, 0, conn);
        conn.exchange = Exchange::default();
    }
    let ex = &mut conn.exchange;
    if ex.phase == PHASE_IDLE {
        ex.phase = PHASE_RECEIVING;
        ex.req_in_ns = now;
        ex.retrans_start = conn.retrans;
    }
    ex.req_last_ns = now;
    ex.bytes_in += n;
    0
}

#[tracepoint]
pub fn sock_send(ctx: TracePointContext) -> u32 {
    match length_fields(&ctx) {
        Ok((sk, ret, flags)) => on_send(sk, ret, flags),
        Err(_) => 0,
    }
}

#[raw_tracepoint(tracepoint = "sock_send_length")]
pub fn sock_send_raw(ctx: RawTracePointContext) -> u32 {
    let (sk, ret, flags) = length_args(&ctx);
    on_send(sk, ret, flags)
}

#[inline(always)]
fn on_send(sk: u64, ret: i32, flags: i32) -> u32 {
    let Some(conn) = length_event(sk, ret, flags) else {
        return 0;
    };
    let n = ret as u64;
    // SAFETY: as in `on_recv`.
    let conn = unsafe { &mut *conn };
    let ex = &mut conn.exchange;
    if ex.phase == PHASE_IDLE {
        return 0;
    }
    let now = unsafe { bpf_ktime_get_ns() };
    if ex.phase == PHASE_RECEIVING {
        ex.phase = PHASE_RESPONDING;
        ex.first_out_ns = now;
    } else {
        let gap = now.saturating_sub(ex.last_out_ns);
        if gap > ex.max_gap_ns {
            ex.max_gap_ns = gap;
            ex.max_gap_end_ns = now;
        }
        if ex.writes == 1 {
            ex.second_out_ns = now;
        }
    }
    ex.last_out_ns = now;
    ex.writes += 1;
    ex.bytes_out += n;
    0
}

//! TCP connections (connect/accept latency, lifetime, bytes, smoothed RTT, retransmits) and
//! server-side request timing of watched processes, from classic tracepoints only.
//!
//! A connection is keyed by its kernel socket address while it lives. `inet_sock_set_state`
//! creates and closes entries; `tcp_probe` and `tcp_retransmit_skb` add RTT and retransmits;
//! `sock_recv_length` / `sock_send_length` (process context) add bytes and, for watched
//! processes, run a request -> response state machine: the first read after a response starts a
//! new exchange, the first write after reads is the server's first byte.

use aya_ebpf::{
    helpers::bpf_ktime_get_ns,
    macros::{map, tracepoint},
    maps::{HashMap, PerCpuArray, RingBuf},
    programs::TracePointContext,
};
use probe_common::sockets::{
    CONN_ENTRIES, Conn, DROP_CONNS_FULL, DROP_KINDS, DROP_RINGBUF, EV_ACCEPT, EV_CLOSE, EV_CONNECT,
    EV_REQUEST, EVENTS_BYTES, Exchange, PHASE_IDLE, PHASE_RECEIVING, PHASE_RESPONDING, SockEvent,
    Tuple,
};

use crate::{
    atomic_add,
    watch::{count_drop, current, global, list_on, submit_flags, watched},
};

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
    SL_FAMILY,
    SL_PROTOCOL,
    SL_RET,
    SL_FLAGS
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

const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;
const MSG_PEEK: i32 = 2;
const ROLE_CLIENT: u32 = 1;
const ROLE_SERVER: u32 = 2;

#[map]
static SOCK_CONNS: HashMap<u64, Conn> = HashMap::with_max_entries(CONN_ENTRIES, 0);
#[map]
static SOCK_EVENTS: RingBuf = RingBuf::with_byte_size(EVENTS_BYTES, 0);
#[map]
static SOCK_DROPS: PerCpuArray<u64> = PerCpuArray::with_max_entries(DROP_KINDS, 0);
/// Per-CPU scratch space for building a `Conn`: it is too large for the 512-byte BPF stack
/// next to everything else.
#[map]
static SOCK_SCRATCH: PerCpuArray<Conn> = PerCpuArray::with_max_entries(1, 0);

#[inline(always)]
fn at<T>(ctx: &TracePointContext, off: &'static u32) -> Result<T, i32> {
    // SAFETY: the offset comes from this kernel's format file for this event.
    unsafe { ctx.read_at::<T>(global(off) as usize) }
}

/// Copies `conn` (a map value) straight into a ring-buffer record: no stack copy.
#[inline(always)]
fn emit(kind: u32, ts_ns: u64, skaddr: u64, duration_ns: u64, conn: *const Conn) {
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
        None => count_drop(&SOCK_DROPS, DROP_RINGBUF),
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
            count_drop(&SOCK_DROPS, DROP_CONNS_FULL);
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
                emit(EV_CONNECT, now, sk, took, conn);
            } else if old == global(&TCP_SYN_RECV) {
                emit(EV_ACCEPT, now, sk, took, conn);
            }
        }
    } else if new == global(&TCP_CLOSE) {
        if let Some(conn) = SOCK_CONNS.get_ptr_mut(&sk) {
            // SAFETY: a live map value, removed only after both emits.
            unsafe {
                if (*conn).exchange.phase == PHASE_RESPONDING {
                    emit(EV_REQUEST, now, sk, 0, conn);
                }
                emit(EV_CLOSE, now, sk, now - (*conn).start_ns, conn);
            }
            let _ = SOCK_CONNS.remove(&sk);
        }
    }
    Ok(())
}

#[tracepoint]
pub fn tcp_probe(ctx: TracePointContext) -> u32 {
    match try_tcp_probe(&ctx) {
        Ok(()) | Err(_) => 0,
    }
}

fn try_tcp_probe(ctx: &TracePointContext) -> Result<(), i32> {
    let sk: u64 = at(ctx, &TP_SKADDR)?;
    let Some(conn) = SOCK_CONNS.get_ptr_mut(&sk) else {
        return Ok(());
    };
    let srtt: u32 = at(ctx, &TP_SRTT)?;
    let cwnd: u32 = at(ctx, &TP_CWND)?;
    // SAFETY: live map value; counters shared with other CPUs use atomic adds.
    unsafe {
        atomic_add(&raw mut (*conn).rtt_samples, 1);
        atomic_add(&raw mut (*conn).srtt_sum_us, u64::from(srtt));
        (*conn).srtt_last_us = srtt;
        if srtt > (*conn).srtt_max_us {
            (*conn).srtt_max_us = srtt;
        }
        (*conn).cwnd_last = cwnd;
    }
    Ok(())
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
        unsafe { (*conn).retrans += 1 };
    }
    Ok(())
}

/// The connection of a process-context send/recv on a TCP socket, if tracked.
#[inline(always)]
fn length_event(ctx: &TracePointContext) -> Result<Option<(u64, *mut Conn, u64)>, i32> {
    let family: u16 = at(ctx, &SL_FAMILY)?;
    let protocol: u16 = at(ctx, &SL_PROTOCOL)?;
    if (family != AF_INET && family != AF_INET6) || u32::from(protocol) != global(&IPPROTO_TCP) {
        return Ok(None);
    }
    let ret: i32 = at(ctx, &SL_RET)?;
    let flags: i32 = at(ctx, &SL_FLAGS)?;
    if ret <= 0 || flags & MSG_PEEK != 0 {
        return Ok(None);
    }
    let sk: u64 = at(ctx, &SL_SK)?;
    let Some(conn) = SOCK_CONNS.get_ptr_mut(&sk) else {
        return Ok(None);
    };
    let tgid = current().0;
    // SAFETY: live map value.
    unsafe {
        if (*conn).tgid == 0 {
            (*conn).tgid = tgid;
        }
    }
    Ok(Some((sk, conn, ret as u64)))
}

#[tracepoint]
pub fn sock_recv(ctx: TracePointContext) -> u32 {
    match try_recv(&ctx) {
        Ok(()) | Err(_) => 0,
    }
}

fn try_recv(ctx: &TracePointContext) -> Result<(), i32> {
    let Some((sk, conn, n)) = length_event(ctx)? else {
        return Ok(());
    };
    // SAFETY: live map value; the owning process's reads and writes are serialised by the
    // socket lock, so the exchange is updated by one CPU at a time.
    let conn = unsafe { &mut *conn };
    unsafe { atomic_add(&raw mut conn.bytes_in, n) };
    let tgid = current().0;
    if !list_on() || !watched(tgid) {
        return Ok(());
    }
    let now = unsafe { bpf_ktime_get_ns() };
    let ex = &mut conn.exchange;
    if ex.phase == PHASE_RESPONDING {
        // A new request on a kept-alive connection: the previous exchange is complete.
        emit(EV_REQUEST, now, sk, 0, conn);
        conn.exchange = Exchange::default();
    }
    let ex = &mut conn.exchange;
    if ex.phase == PHASE_IDLE {
        ex.phase = PHASE_RECEIVING;
        ex.req_in_ns = now;
    }
    ex.req_last_ns = now;
    ex.bytes_in += n;
    Ok(())
}

#[tracepoint]
pub fn sock_send(ctx: TracePointContext) -> u32 {
    match try_send(&ctx) {
        Ok(()) | Err(_) => 0,
    }
}

fn try_send(ctx: &TracePointContext) -> Result<(), i32> {
    let Some((_, conn, n)) = length_event(ctx)? else {
        return Ok(());
    };
    // SAFETY: as in `try_recv`.
    let conn = unsafe { &mut *conn };
    unsafe { atomic_add(&raw mut conn.bytes_out, n) };
    let ex = &mut conn.exchange;
    if ex.phase == PHASE_IDLE || !watched(current().0) {
        return Ok(());
    }
    let now = unsafe { bpf_ktime_get_ns() };
    if ex.phase == PHASE_RECEIVING {
        ex.phase = PHASE_RESPONDING;
        ex.first_out_ns = now;
    } else {
        let gap = now.saturating_sub(ex.last_out_ns);
        if gap > ex.max_gap_ns {
            ex.max_gap_ns = gap;
        }
        if ex.writes == 1 {
            ex.second_out_ns = now;
        }
    }
    ex.last_out_ns = now;
    ex.writes += 1;
    ex.bytes_out += n;
    Ok(())
}

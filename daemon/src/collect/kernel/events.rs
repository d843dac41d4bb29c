//! The events waiting in the ring buffers' readers, folded into the window accumulators:
//! sockets (connects, accepts, exchanges, retransmits, closes) and CUDA driver calls.

use probe_common::{
    cuda::{AllocOutcome, CudaCall, CudaEvent},
    sockets::{ROLE_CLIENT, SockEvent, SockEventKind},
};
use tokio::sync::mpsc::Receiver;

use super::exchange::{Exchange, Retransmit};
use super::{KernelCollector, bounded_push};
use crate::collect::timeline::{XidEvent, XidSource};
use crate::probes::sockets::endpoints;

impl KernelCollector {
    /// Moves every event waiting in the readers into the window accumulators.
    pub fn drain(&mut self) {
        let mut socks = Vec::new();
        if let Some(r) = self.sock.as_mut() {
            drain_into(&mut r.rx, &mut socks);
        }
        for ev in &socks {
            self.on_sock(ev);
        }
        let mut cudas = Vec::new();
        if let Some(r) = self.cuda.as_mut() {
            drain_into(&mut r.rx, &mut cudas);
        }
        for ev in &cudas {
            self.on_cuda(ev);
        }
    }

    fn on_sock(&mut self, ev: &SockEvent) {
        let ours = self.is_server(ev.tgid) || Some(ev.tgid) == self.opts.loadgen;
        let Some(kind) = SockEventKind::decode(ev.kind) else {
            return;
        };
        // The first event of an accepted socket that names its process settles whose accept it
        // was (a close with no process: nobody watched ever read from it).
        if ev.tgid != 0
            && let Some(ms) = self.accepts.owned(ev.skaddr)
        {
            self.count_accept(ev.tgid, ms);
        }
        match kind {
            SockEventKind::Accept => {
                self.accepts
                    .accepted(ev.skaddr, ev.duration_ns as f64 / 1e6);
            }
            // connect() names its caller: a server's own outgoing connection, or the load
            // generator's (every part's when there is one).
            SockEventKind::Connect if ours => {
                if self.is_server(ev.tgid)
                    && let Some((local, _)) = endpoints(&ev.conn.tuple)
                {
                    self.callers.insert(local, ev.tgid);
                }
                let p = if self.is_server(ev.tgid) {
                    self.pending.entry(ev.tgid).or_default()
                } else {
                    &mut self.shared
                };
                p.connected(ev.duration_ns as f64 / 1e6);
            }
            // A server's own calls out (a gateway calling its services) are not its exchanges.
            SockEventKind::Request if self.is_server(ev.tgid) && ev.conn.role != ROLE_CLIENT => {
                let ex = ev.conn.exchange;
                let exchange = Exchange::of(ev.tgid, &ev.conn, self.caller(ev.tgid, &ev.conn));
                let p = self.pending.entry(ev.tgid).or_default();
                let ms = |ns: u64| ns as f64 / 1e6;
                p.ttfb_ms
                    .push(ms(ex.first_out_ns.saturating_sub(ex.req_in_ns)));
                p.first_token_ms.push(ms(exchange.first_token_ns()));
                if let Some(t) = exchange.caller {
                    p.called_first_token_ms
                        .push((t, ms(exchange.first_token_ns())));
                }
                p.exchange_ms
                    .push(ms(ex.last_out_ns.saturating_sub(ex.req_in_ns)));
                p.retrans_exchanges += u64::from(exchange.retrans > 0);
                self.joins_dropped += bounded_push(&mut self.exchanges, exchange);
            }
            SockEventKind::Retrans if ours => {
                if let Some((local, remote)) = endpoints(&ev.conn.tuple) {
                    let client = if self.is_server(ev.tgid) {
                        remote
                    } else {
                        local
                    };
                    self.joins_dropped += bounded_push(
                        &mut self.retransmits,
                        Retransmit {
                            ts_ns: ev.ts_ns,
                            client,
                        },
                    );
                }
            }
            SockEventKind::Close => {
                let last = self.last_conn.remove(&ev.skaddr).unwrap_or_default();
                if ours {
                    self.closed.entry(ev.tgid).or_default().add(&ev.conn, last);
                }
                if self.is_server(ev.tgid) {
                    let p = self.pending.entry(ev.tgid).or_default();
                    p.lifetime_ms.push(ev.duration_ns as f64 / 1e6);
                }
                let _ = self.accepts.owned(ev.skaddr);
            }
            _ => {}
        }
    }

    /// The watched server other than `tgid` that dialled `conn` (one of `tgid`'s), if one did.
    pub(super) fn caller(&self, tgid: u32, conn: &probe_common::sockets::Conn) -> Option<u32> {
        let (_, remote) = endpoints(&conn.tuple)?;
        self.callers.get(&remote).copied().filter(|&t| t != tgid)
    }

    /// An accept of `tgid`'s: counted when it is a watched server.
    fn count_accept(&mut self, tgid: u32, ms: f64) {
        if self.is_server(tgid) {
            self.pending.entry(tgid).or_default().connected(ms);
        }
    }

    /// Accepts still waiting whose socket a process took since: the kernel's connection table
    /// names it before the socket's first exchange ends.
    pub(super) fn settle_accepts(&mut self) {
        if self.accepts.is_empty() {
            return;
        }
        let Ok(conns) = self.probes.sock_conns() else {
            return;
        };
        for (sk, c) in conns {
            if c.tgid != 0
                && let Some(ms) = self.accepts.owned(sk)
            {
                self.count_accept(c.tgid, ms);
            }
        }
    }

    fn on_cuda(&mut self, ev: &CudaEvent) {
        let call = CudaCall::of(ev.api, ev.ret);
        if !self.is_server(ev.tgid) && call != Some(CudaCall::Xid) {
            return;
        }
        self.account.apply(ev);
        let g = if call == Some(CudaCall::Xid) {
            &mut self.shared.gpu
        } else {
            &mut self.pending.entry(ev.tgid).or_default().gpu
        };
        match call {
            Some(CudaCall::Alloc(AllocOutcome::Ok)) => g.allocs += 1,
            Some(
                CudaCall::Alloc(AllocOutcome::OutOfMemory)
                | CudaCall::Map(AllocOutcome::OutOfMemory),
            ) => g.oom += 1,
            Some(CudaCall::Free) => g.frees += 1,
            Some(CudaCall::Sync) => g.sync_ms += ev.duration_ns as f64 / 1e6,
            Some(CudaCall::Xid) => {
                g.xids += 1;
                // The event's kernel time on the wall clock: now less its age.
                let age_ms = crate::clock::monotonic_ns().saturating_sub(ev.ts_ns) / 1_000_000;
                g.xid_events.push(XidEvent {
                    unix_ms: crate::clock::unix_ms().saturating_sub(age_ms),
                    code: Some(ev.size),
                    gpu: None,
                    source: XidSource::Kernel,
                });
            }
            Some(
                CudaCall::Alloc(AllocOutcome::Failed)
                | CudaCall::Map(_)
                | CudaCall::Unmap
                | CudaCall::Counted,
            )
            | None => {}
        }
    }
}

fn drain_into<T>(rx: &mut Receiver<T>, out: &mut Vec<T>) {
    while let Ok(v) = rx.try_recv() {
        out.push(v);
    }
}

//! A process's kernel events over one window, and the exchange and connect statistics they
//! make.

use crate::collect::timeline::{CalledBy, GpuSignals, NetSignals};
use crate::quantile::exact::interpolated;

/// Per-window accumulators of one process (or of the events no server owns), reset when a
/// window is closed.
#[derive(Default)]
pub(super) struct Pending {
    pub(super) connect_ms: Vec<f64>,
    pub(super) connects: u64,
    pub(super) ttfb_ms: Vec<f64>,
    pub(super) first_token_ms: Vec<f64>,
    pub(super) exchange_ms: Vec<f64>,
    pub(super) retrans_exchanges: u64,
    /// Lifetimes of the server's connections that closed, ms.
    pub(super) lifetime_ms: Vec<f64>,
    /// First tokens of the exchanges another watched server asked for: the caller's process
    /// and the time, ms.
    pub(super) called_first_token_ms: Vec<(u32, f64)>,
    pub(super) gpu: GpuSignals,
}

impl Pending {
    /// One connection set up (connected or accepted) in `ms`.
    pub(super) fn connected(&mut self, ms: f64) {
        self.connects += 1;
        self.connect_ms.push(ms);
    }

    /// Adds `o`'s events to these (several processes of one server).
    pub(super) fn merge(&mut self, o: &Pending) {
        self.connect_ms.extend(&o.connect_ms);
        self.connects += o.connects;
        self.ttfb_ms.extend(&o.ttfb_ms);
        self.first_token_ms.extend(&o.first_token_ms);
        self.exchange_ms.extend(&o.exchange_ms);
        self.retrans_exchanges += o.retrans_exchanges;
        self.lifetime_ms.extend(&o.lifetime_ms);
        self.called_first_token_ms.extend(&o.called_first_token_ms);
        let (g, h) = (&mut self.gpu, &o.gpu);
        g.allocs += h.allocs;
        g.oom += h.oom;
        g.frees += h.frees;
        g.sync_ms += h.sync_ms;
        g.xids += h.xids;
        g.xid_events.extend(&h.xid_events);
    }
}

/// Sets the exchange and connect statistics of a window from its events.
pub(super) fn fill_net(net: &mut NetSignals, p: Pending) {
    let sorted = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v
    };
    let mut by_caller = std::collections::BTreeMap::<u32, Vec<f64>>::new();
    for &(tgid, ms) in &p.called_first_token_ms {
        by_caller.entry(tgid).or_default().push(ms);
    }
    net.callers = by_caller
        .into_iter()
        .map(|(tgid, v)| {
            let v = sorted(v);
            CalledBy {
                tgid,
                exchanges: v.len() as u64,
                first_token_p50_ms: interpolated(&v, 0.5),
            }
        })
        .collect();
    let (connect, ttfb, first, whole, lifetime, called) = (
        sorted(p.connect_ms),
        sorted(p.ttfb_ms),
        sorted(p.first_token_ms),
        sorted(p.exchange_ms),
        sorted(p.lifetime_ms),
        sorted(p.called_first_token_ms.iter().map(|&(_, ms)| ms).collect()),
    );
    net.connects = p.connects;
    net.connect_p99_ms = interpolated(&connect, 0.99);
    net.closes = lifetime.len() as u64;
    net.lifetime_p50_ms = interpolated(&lifetime, 0.5);
    net.exchanges = ttfb.len() as u64;
    net.retrans_exchanges = p.retrans_exchanges;
    net.server_ttfb_p50_ms = interpolated(&ttfb, 0.5);
    net.server_first_token_p50_ms = interpolated(&first, 0.5);
    net.server_first_token_p95_ms = interpolated(&first, 0.95);
    net.exchange_p50_ms = interpolated(&whole, 0.5);
    net.exchange_p99_ms = interpolated(&whole, 0.99);
    net.called_exchanges = called.len() as u64;
    net.called_first_token_p50_ms = interpolated(&called, 0.5);
}

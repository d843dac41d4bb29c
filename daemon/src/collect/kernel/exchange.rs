//! A server-side exchange and a retransmit, kept for joins with the load generator's records.

use probe_common::sockets::Conn;
use serde::Serialize;

use crate::probes::sockets::endpoints;

/// One server-side request/response exchange, kept for joins with client-side records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Exchange {
    /// Server process.
    pub tgid: u32,
    /// The client's address as the server sees it (its remote endpoint).
    pub client: Option<std::net::SocketAddr>,
    /// First request byte read (kernel monotonic ns).
    pub req_in_ns: u64,
    /// First response write.
    pub first_out_ns: u64,
    /// Second response write (first token of a streamed response); 0 if none.
    pub second_out_ns: u64,
    /// Last response write.
    pub last_out_ns: u64,
    /// The longest silence between two response writes, ns.
    pub max_gap_ns: u64,
    /// The write that ended it; 0 with fewer than two writes.
    pub max_gap_end_ns: u64,
    /// Segments the server's side of the connection retransmitted during the exchange.
    pub retrans: u32,
    /// The watched server that asked for it (a gateway calling this hop), found by the
    /// connection's remote end; `None` for any other client.
    pub caller: Option<u32>,
}

impl Exchange {
    /// The exchange of `conn`, a connection of server process `tgid` that watched server
    /// `caller` dialled, if one did.
    pub(super) fn of(tgid: u32, conn: &Conn, caller: Option<u32>) -> Self {
        let ex = conn.exchange;
        Self {
            tgid,
            client: endpoints(&conn.tuple).map(|(_, remote)| remote),
            req_in_ns: ex.req_in_ns,
            first_out_ns: ex.first_out_ns,
            second_out_ns: ex.second_out_ns,
            last_out_ns: ex.last_out_ns,
            max_gap_ns: ex.max_gap_ns,
            max_gap_end_ns: ex.max_gap_end_ns,
            retrans: conn.retrans.saturating_sub(ex.retrans_start),
            caller,
        }
    }

    /// Request in -> first token, ns: the second write (the first after a streamed response's
    /// headers), or the first when the response came in one write.
    #[must_use]
    pub fn first_token_ns(&self) -> u64 {
        let out = if self.second_out_ns == 0 {
            self.first_out_ns
        } else {
            self.second_out_ns
        };
        out.saturating_sub(self.req_in_ns)
    }
}

/// A segment retransmitted on a connection between the load generator and a watched server,
/// by either side: named by the client's address of the connection, to join with the request
/// it delayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Retransmit {
    /// When (kernel monotonic ns).
    pub ts_ns: u64,
    /// The client's address: the server connection's remote end, or the load generator
    /// connection's local end.
    pub client: std::net::SocketAddr,
}

//! Joins the load generator's per-request records with the server-side exchanges the kernel saw
//! on the same connection: the client's local address is the exchange's remote end, and the
//! server read the request between the client's send and end (a client port may be reused by a
//! later connection, so the time decides).
//!
//! Both sides use `CLOCK_MONOTONIC` (`crate::clock`), so a joined pair gives exact one-way
//! times: the request's transit (client sent -> server read) and the first token's
//! (server wrote -> client read).

use std::{collections::HashMap, net::SocketAddr};

use super::kernel::{Exchange, Retransmit};
use super::timeline::KernelParts;
use crate::measure::{RequestRecord, StressReport};

/// Exchanges indexed by client address.
pub struct Exchanges<'a> {
    by_client: HashMap<SocketAddr, Vec<&'a Exchange>>,
    /// The run's start on the monotonic clock: record times are µs after it.
    start_ns: u64,
}

/// A record joined with its exchange, in kernel monotonic ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Joined<'a> {
    /// The server side.
    pub exchange: &'a Exchange,
    /// Client sent the request.
    pub sent_ns: u64,
    /// Client read the first token, when one came.
    pub client_first_token_ns: Option<u64>,
    /// The longest gap between two of the client's token reads, ns (0 with fewer than two).
    pub client_max_gap_ns: u64,
}

impl<'a> Exchanges<'a> {
    /// Indexes `exchanges` for joins with `report`'s records.
    #[must_use]
    pub fn new(exchanges: &'a [Exchange], report: &StressReport) -> Self {
        let mut by_client: HashMap<SocketAddr, Vec<&Exchange>> = HashMap::new();
        for ex in exchanges {
            if let Some(c) = ex.client {
                by_client.entry(c).or_default().push(ex);
            }
        }
        Self {
            by_client,
            start_ns: report.started_monotonic_ns,
        }
    }

    /// Monotonic ns of a record time (µs after the run's start).
    #[must_use]
    pub fn ns(&self, us: u64) -> u64 {
        self.start_ns + us * 1000
    }

    /// The exchange that served `r`, if the kernel saw it.
    #[must_use]
    pub fn find(&self, r: &RequestRecord) -> Option<Joined<'a>> {
        let (sent_ns, end_ns) = (self.ns(r.actual_us), self.ns(r.end_us));
        // 1 ms of slack: the client stamps "sent" just before its write.
        let exchange = self
            .by_client
            .get(&r.local_addr?)?
            .iter()
            .find(|e| e.req_in_ns + 1_000_000 >= sent_ns && e.req_in_ns <= end_ns)?;
        Some(Joined {
            exchange,
            sent_ns,
            client_first_token_ns: r.token_us.first().map(|&t| self.ns(t)),
            client_max_gap_ns: (r.token_us.windows(2))
                .map(|w| w[1].saturating_sub(w[0]) * 1000)
                .max()
                .unwrap_or(0),
        })
    }
}

/// Retransmits indexed by the client's address of their connection.
pub struct Retransmits {
    by_client: HashMap<SocketAddr, Vec<u64>>,
    start_ns: u64,
}

impl Retransmits {
    /// Indexes `retransmits` for joins with `report`'s records.
    #[must_use]
    pub fn new(retransmits: &[Retransmit], report: &StressReport) -> Self {
        let mut by_client: HashMap<SocketAddr, Vec<u64>> = HashMap::new();
        for r in retransmits {
            by_client.entry(r.client).or_default().push(r.ts_ns);
        }
        Self {
            by_client,
            start_ns: report.started_monotonic_ns,
        }
    }

    /// Whether a segment of `r`'s connection was retransmitted while `r` was in flight.
    #[must_use]
    pub fn hit(&self, r: &RequestRecord) -> bool {
        let (sent, end) = (
            self.start_ns + r.actual_us * 1000,
            self.start_ns + r.end_us * 1000,
        );
        r.local_addr
            .and_then(|a| self.by_client.get(&a))
            .is_some_and(|ts| ts.iter().any(|&t| t >= sent && t <= end))
    }
}

impl Joined<'_> {
    /// When the server wrote the first token: its second write when that came before the
    /// client read the token (headers first, as streamed responses do), else its first;
    /// unless the server fell silent after its second write and spoke again before the client
    /// read the token ([`Joined::silent_before_the_token`]): then the write that ended the
    /// silence carried the token, and the second carried something else (a role announcement
    /// sent, or relayed by a gateway, ahead of a queued answer; a keep-alive).
    #[must_use]
    pub fn server_first_token_ns(&self) -> u64 {
        let e = self.exchange;
        match self.client_first_token_ns {
            Some(_) if self.silent_before_the_token() => e.max_gap_end_ns,
            Some(c) if e.second_out_ns != 0 && e.second_out_ns <= c => e.second_out_ns,
            _ => e.first_out_ns,
        }
    }

    /// Whether the server's longest silence between writes came after its second write and
    /// ended before the client read the first token, and the client saw no gap as long
    /// between its tokens (at most half of it): a silence between tokens reaches the client
    /// as a gap between their reads, the path keeping their order, so this one came before the
    /// first token.
    #[must_use]
    pub fn silent_before_the_token(&self) -> bool {
        let e = self.exchange;
        self.client_first_token_ns.is_some_and(|c| {
            e.second_out_ns != 0
                && e.max_gap_end_ns > e.second_out_ns
                && e.max_gap_end_ns <= c
                && self.client_max_gap_ns.saturating_mul(2) < e.max_gap_ns
        })
    }

    /// Client sent -> the server's first read of the request, ms: the request's transit plus
    /// any time it waited unread (a listen backlog, a socket no worker reads).
    #[must_use]
    pub fn read_delay_ms(&self) -> f64 {
        self.exchange.req_in_ns.saturating_sub(self.sent_ns) as f64 / 1e6
    }

    /// Time on the wire and in socket queues before the first token, ms: the request's
    /// transit (sent -> server read) plus the first token's (server wrote -> client read).
    #[must_use]
    pub fn transit_ms(&self) -> Option<f64> {
        let client = self.client_first_token_ns?;
        let up = self.exchange.req_in_ns.saturating_sub(self.sent_ns);
        let down = client.saturating_sub(self.server_first_token_ns());
        Some((up + down) as f64 / 1e6)
    }

    /// The request's path cut at the kernel's timestamps, for a client that read the first
    /// byte of the answer at `first_ns` and its end at `end_ns`. Every time is taken in whole
    /// µs and clamped into the client's interval (the client stamps "sent" just before its
    /// write; a read can be stamped a little before the write the kernel saw), so the parts
    /// tile sent -> first byte and sent -> end exactly.
    #[must_use]
    pub fn parts(&self, first_ns: u64, end_ns: u64) -> KernelParts {
        let us = |ns: u64| ns / 1000;
        let sent = us(self.sent_ns);
        let first = us(first_ns).max(sent);
        let end = us(end_ns).max(first);
        let e = self.exchange;
        let read = us(e.req_in_ns).clamp(sent, first);
        let wrote_first = us(self.server_first_token_ns()).clamp(read, first);
        let wrote_last = us(e.last_out_ns.max(e.first_out_ns)).clamp(read, end);
        let ms = |a: u64, b: u64| (b - a) as f64 / 1000.0;
        KernelParts {
            to_server_ms: ms(sent, read),
            server_first_ms: ms(read, wrote_first),
            to_client_first_ms: ms(wrote_first, first),
            server_last_ms: ms(read, wrote_last),
            to_client_last_ms: ms(wrote_last, end),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::Endpoint;

    /// A run that started at monotonic time 0, so record times are kernel times.
    fn report() -> StressReport {
        serde_json::from_value(serde_json::json!({
            "schema": "inferscope.stress.report", "version": 1, "scenario": "t", "target": "http://x",
            "started_unix_ns": 1u64, "started_monotonic_ns": 0, "elapsed_s": 1.0,
            "stopped": null, "slo_pass": true, "phases": [], "events": [], "records": []
        }))
        .unwrap()
    }

    fn exchange(client: &str, req_in_ms: u64, first_ms: u64, second_ms: u64) -> Exchange {
        Exchange {
            tgid: 1,
            client: Some(client.parse().unwrap()),
            req_in_ns: req_in_ms * 1_000_000,
            first_out_ns: first_ms * 1_000_000,
            second_out_ns: second_ms * 1_000_000,
            last_out_ns: second_ms * 1_000_000,
            max_gap_ns: (second_ms - first_ms) * 1_000_000,
            max_gap_end_ns: second_ms * 1_000_000,
            retrans: 0,
            caller: None,
        }
    }

    fn record(local: &str, sent_ms: u64, first_token_ms: u64, end_ms: u64) -> RequestRecord {
        let mut r = RequestRecord::new(0, 0, Endpoint::Chat, sent_ms * 1000);
        r.actual_us = sent_ms * 1000;
        r.token_us = vec![first_token_ms * 1000];
        r.end_us = end_ms * 1000;
        r.local_addr = Some(local.parse().unwrap());
        r
    }

    #[test]
    fn joins_by_client_address_and_time_and_measures_transit() {
        // The same client port served two requests; the second one is ours.
        let ex = [
            exchange("127.0.0.1:5000", 100, 101, 150),
            exchange("127.0.0.1:5000", 1002, 1003, 1200),
            exchange("127.0.0.1:6000", 1001, 1002, 1100),
        ];
        let rep = report();
        let idx = Exchanges::new(&ex, &rep);
        let j = idx
            .find(&record("127.0.0.1:5000", 1000, 1210, 1300))
            .unwrap();
        assert_eq!(j.exchange, &ex[1]);
        // 2 ms up (1000 -> 1002), 10 ms down (1200 -> 1210).
        assert!((j.transit_ms().unwrap() - 12.0).abs() < 1e-9);
        assert!((j.read_delay_ms() - 2.0).abs() < 1e-9);
        assert!(
            idx.find(&record("127.0.0.1:7000", 1000, 1210, 1300))
                .is_none()
        );
        assert!(
            idx.find(&record("127.0.0.1:5000", 2000, 2010, 2100))
                .is_none()
        );
    }

    #[test]
    fn a_retransmit_on_the_connection_while_in_flight_hits_the_request() {
        let client: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let rt = [Retransmit {
            ts_ns: 1_100_000_000,
            client,
        }];
        let rep = report();
        let idx = Retransmits::new(&rt, &rep);
        assert!(idx.hit(&record("127.0.0.1:5000", 1000, 1050, 1300)));
        assert!(
            !idx.hit(&record("127.0.0.1:5000", 1200, 1250, 1300)),
            "after it"
        );
        assert!(
            !idx.hit(&record("127.0.0.1:6000", 1000, 1050, 1300)),
            "another connection"
        );
    }

    #[test]
    fn kernel_parts_tile_the_client_interval() {
        // Sent at 1000, read at 1002, first token written at 1200 and read at 1210, last
        // written at 1200 (second write), client end at 1300.
        let ex = [exchange("127.0.0.1:5000", 1002, 1003, 1200)];
        let rep = report();
        let j = Exchanges::new(&ex, &rep)
            .find(&record("127.0.0.1:5000", 1000, 1210, 1300))
            .unwrap();
        let p = j.parts(1_210_000_000, 1_300_000_000);
        assert_eq!(
            (p.to_server_ms, p.server_first_ms, p.to_client_first_ms),
            (2.0, 198.0, 10.0)
        );
        assert_eq!((p.server_last_ms, p.to_client_last_ms), (198.0, 100.0));
        // A read stamped before the client's "sent" is clamped: no negative part.
        let early = Joined {
            sent_ns: 1_003_000_000,
            ..j
        };
        let p = early.parts(1_210_000_000, 1_300_000_000);
        assert_eq!((p.to_server_ms, p.server_first_ms), (0.0, 197.0));
        assert_eq!(
            (p.to_server_ms + p.server_first_ms + p.to_client_first_ms,),
            (207.0,)
        );
    }

    #[test]
    fn a_silence_after_the_second_write_puts_the_token_at_its_end() {
        // A gateway: its head at 1001, the upstream's role announcement relayed at 1002, then
        // silent until the queued answer's first token at 4000; the client reads it at 4001
        // and its next tokens 2 ms apart.
        let mut relay = exchange("127.0.0.1:5000", 1000, 1001, 1002);
        relay.max_gap_ns = 2_998_000_000;
        relay.max_gap_end_ns = 4_000_000_000;
        relay.last_out_ns = 4_100_000_000;
        let ex = [relay];
        let rep = report();
        let idx = Exchanges::new(&ex, &rep);
        let mut r = record("127.0.0.1:5000", 999, 4001, 4200);
        r.token_us.extend([4_003_000, 4_005_000]);
        let j = idx.find(&r).unwrap();
        assert!(j.silent_before_the_token());
        assert_eq!(j.server_first_token_ns(), 4_000_000_000);
        assert!((j.transit_ms().unwrap() - 2.0).abs() < 1e-9, "1 up, 1 down");
        // A silence between tokens reaches the client as a gap between their reads, however
        // late the path delivers them (here 3.5 s): the second write was the first token.
        r.token_us = vec![4_502_000, 7_500_000, 7_502_000];
        let j = idx.find(&r).unwrap();
        assert!(!j.silent_before_the_token());
        assert_eq!(j.server_first_token_ns(), 1_002_000_000);
        // A silence that ended after the client read the token was not before it.
        r.token_us = vec![1_050_000];
        let j = idx.find(&r).unwrap();
        assert_eq!(j.server_first_token_ns(), 1_002_000_000);
    }

    #[test]
    fn a_first_token_in_the_first_write_is_timed_from_it() {
        let ex = [exchange("127.0.0.1:5000", 1001, 1100, 1300)];
        let rep = report();
        let j = Exchanges::new(&ex, &rep)
            .find(&record("127.0.0.1:5000", 1000, 1105, 1400))
            .unwrap();
        assert_eq!(j.server_first_token_ns(), 1_100_000_000);
        assert!((j.transit_ms().unwrap() - 6.0).abs() < 1e-9);
    }
}

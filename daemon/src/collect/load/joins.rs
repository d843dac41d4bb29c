//! A window's sampled requests joined with the kernel's view of the server: their transit,
//! the requests a lost segment held, and each request cut into parts.

use std::collections::BTreeMap;

use super::clock::unix_ms;
use super::duplicates::{Sent, duplicate_prefills};
use crate::collect::{
    join::{Exchanges, Joined, Retransmits},
    session::ServerSide,
    timeline::{RequestParts, Timeline},
};
use crate::measure::{RequestRecord, StressReport};

/// What a window's sampled requests give once joined with the kernel's view.
#[derive(Default)]
pub(super) struct Joins {
    pub(super) transit: Vec<f64>,
    pub(super) read_delay: Vec<f64>,
    /// E2E of joined requests loss hit (a retransmit, a stall: [`stalled`]), and of the
    /// other joined ones.
    pub(super) loss_hit_e2e: Vec<f64>,
    pub(super) clean_e2e: Vec<f64>,
    /// The window's successful requests cut into parts.
    pub(super) parts: Vec<RequestParts>,
    /// LLM requests with a prompt key, and those of them that duplicated a prefill.
    pub(super) keyed: u64,
    pub(super) duplicates: u64,
    /// The share of them chance gives a twin (`Duplicates::chance`).
    pub(super) chance: f64,
}

impl Joins {
    /// The share of the window's keyed (LLM) requests that duplicated a prefill.
    pub(super) fn duplicate_share(&self) -> Option<f64> {
        (self.keyed > 0).then(|| self.duplicates as f64 / self.keyed as f64)
    }
}

/// The sampled requests joined with the server's exchanges and cut into parts, by window.
pub(super) fn join_sample(
    timeline: &mut Timeline,
    report: &StressReport,
    sample: &[RequestRecord],
    server: &ServerSide,
    mut window_of: impl FnMut(&mut Timeline, u64) -> usize,
) -> BTreeMap<usize, Joins> {
    let exchanges = Exchanges::new(&server.exchanges, report);
    let retransmits = Retransmits::new(&server.retransmits, report);
    let duplicates = duplicate_prefills(sample.iter().filter_map(Sent::of));
    let mut out: BTreeMap<usize, Joins> = BTreeMap::new();
    for r in sample {
        let i = window_of(timeline, unix_ms(report, r.intended_us));
        let j = out.entry(i).or_default();
        if r.prompt_key.is_some() {
            j.keyed += 1;
            j.duplicates += u64::from(duplicates.ids.contains(&r.id));
        }
        let joined = exchanges.find(r);
        let cut = parts(r, joined.as_ref(), &exchanges);
        if let Some(x) = joined {
            j.transit.extend(x.transit_ms());
            j.read_delay.push(x.read_delay_ms());
            let e2e = r.e2e_us() as f64 / 1000.0;
            let srtt_us = timeline
                .windows
                .get(i)
                .and_then(|w| w.net.as_ref()?.srtt_mean_us);
            if retransmits.hit(r) || stalled(&cut, srtt_us) {
                j.loss_hit_e2e.push(e2e);
            } else {
                j.clean_e2e.push(e2e);
            }
        }
        if !r.counts_as_error() {
            j.parts.push(cut);
        }
    }
    // Chance at the window's own rate of the requests read (a thinned sample has fewer twins
    // to find, and fewer by chance alike).
    let len_s = timeline.len_ms.max(1) as f64 / 1000.0;
    for j in out.values_mut() {
        j.chance = duplicates.chance(j.keyed as f64 / len_s);
    }
    out
}

/// How long past 4 smoothed RTTs an answer's last bytes may take from the server's write to
/// the client's read before a lost segment is what held them. Linux recovers a lost segment
/// with one in flight (a token stream's usual state) by a retransmission timeout or a tail-loss
/// probe, each about 200 ms; a probe that sends new data instead of the lost segment, as it
/// does when the application wrote more (a lost ACK, then Nagle holding the next token), is no
/// retransmit to the kernel's tracepoint. 100 ms is above Nagle's hold for a delayed ACK
/// (40 ms), which the `transit stall` rule names from the first token.
const STALL_MS: f64 = 100.0;

/// Whether the kernel saw `cut`'s answer stall in transit: its last bytes took
/// [`STALL_MS`] + 4 RTTs (the window's mean smoothed RTT, µs) from write to read.
fn stalled(cut: &RequestParts, srtt_us: Option<f64>) -> bool {
    cut.kernel
        .as_ref()
        .is_some_and(|k| k.to_client_last_ms >= STALL_MS + 4.0 * srtt_us.unwrap_or(0.0) / 1000.0)
}

/// `r` cut into parts: its latencies and send lag, and its path as the kernel saw it when
/// `joined` with the server's exchange.
fn parts(r: &RequestRecord, joined: Option<&Joined<'_>>, joins: &Exchanges<'_>) -> RequestParts {
    let ms = |us: u64| us as f64 / 1000.0;
    let ttft = r.ttft_us();
    RequestParts {
        ttft_ms: ttft.map(ms),
        e2e_ms: ms(r.e2e_us()),
        send_lag_ms: ms(r.send_lag_us()),
        kernel: joined.map(|j| {
            let first_us = ttft.map_or(r.end_us, |t| r.intended_us + t);
            j.parts(joins.ns(first_us), joins.ns(r.end_us))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_held_in_transit_past_a_recovery_timer_is_stalled() {
        let cut = |to_client_last_ms: f64| RequestParts {
            ttft_ms: Some(10.0),
            e2e_ms: 300.0,
            send_lag_ms: 0.0,
            kernel: Some(crate::collect::timeline::KernelParts {
                to_server_ms: 0.1,
                server_first_ms: 5.0,
                to_client_first_ms: 0.1,
                server_last_ms: 100.0,
                to_client_last_ms,
            }),
        };
        // A tail-loss probe's 200 ms on a path of 50 µs RTT.
        assert!(stalled(&cut(200.0), Some(50.0)));
        // Nagle holding the last token for a delayed ACK, and a healthy path.
        assert!(!stalled(&cut(40.0), Some(50.0)));
        assert!(!stalled(&cut(0.1), None));
        // 200 ms is 4 RTTs on a path of 50 ms: the answer was in flight, not held.
        assert!(!stalled(&cut(200.0), Some(50_000.0)));
        // Without the kernel's view of the request nothing is said.
        let unseen = RequestParts {
            kernel: None,
            ..cut(500.0)
        };
        assert!(!stalled(&unseen, None));
    }
}

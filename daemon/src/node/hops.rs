//! Which server holds a gateway's rise, window by window. A watched server that called others
//! in the window just closed (a RAG gateway calling its search and chat services) has its
//! rise over its own baseline (its kernel-side first token, what its clients wait for) split
//! between the servers it called (their first token on its calls, against the same in their
//! baselines) and its own time, as `stress --service` splits a phase (`attribute::hops::split`);
//! and what it asked each of them for per request it answered (its calls per request at each
//! hop: the orchestration layer's tool-call depth, from the kernel).

use std::collections::BTreeMap;

use super::line::Line;
use crate::{
    attribute::{
        Cause,
        hops::{self, Calls, HopCalls, HopPart, Hops, Orchestration},
        rolling,
    },
    collect::identity::ServerKey,
};

/// The hops of `gateway`'s window at `at` among `lines`, judged `cause`; `None` when it
/// called no other watched server in that window or did not rise.
pub(super) fn of_window(
    lines: &BTreeMap<ServerKey, Line>,
    gateway: &Line,
    at: u64,
    cause: Cause,
) -> Option<Hops> {
    let calls = Calls(Some(&gateway.pids));
    let parts: Vec<HopPart> = lines
        .values()
        .filter(|h| h.key != gateway.key && h.gone_at.is_none())
        .filter_map(|h| {
            let i = h.timeline.index(at);
            let value = calls.first_token_ms(h.timeline.windows.get(i)?)?;
            let baseline_ms = hops::first_answer_ms(&h.timeline, &baseline(h, i), Some(calls));
            let verdict = h.verdicts.back().filter(|v| v.index == i);
            Some(HopPart {
                hop: h.identity.server.clone(),
                baseline_ms,
                value_ms: Some(value),
                part_ms: hops::rise_of(baseline_ms, Some(value)),
                cause: verdict.map_or(Cause::None, |v| v.verdict.cause),
                confidence: verdict.map_or(0.0, |v| v.verdict.confidence),
            })
        })
        .collect();
    if parts.is_empty() {
        return None;
    }
    let i = gateway.timeline.index(at);
    let own = (
        hops::first_answer_ms(&gateway.timeline, &baseline(gateway, i), None),
        hops::first_answer_ms(&gateway.timeline, &[i], None),
    );
    hops::split(hops::rise_of(own.0, own.1), cause, parts, own)
}

/// What `gateway` asked each other watched server for in its window at `at`, per request it
/// answered there; `None` when it called none of them.
pub(super) fn orchestration(
    lines: &BTreeMap<ServerKey, Line>,
    gateway: &Line,
    at: u64,
) -> Option<Orchestration> {
    let requests = gateway
        .timeline
        .windows
        .get(gateway.timeline.index(at))
        .and_then(|w| w.net.as_ref())
        .map_or(0, |n| n.exchanges);
    let calls: Vec<HopCalls> = lines
        .values()
        .filter(|h| h.key != gateway.key && h.gone_at.is_none())
        .filter_map(|h| {
            let net = h.timeline.windows.get(h.timeline.index(at))?.net.as_ref()?;
            let calls: u64 = net
                .callers
                .iter()
                .filter(|c| gateway.pids.contains(&c.tgid))
                .map(|c| c.exchanges)
                .sum();
            (calls > 0).then(|| HopCalls {
                hop: h.identity.server.clone(),
                calls,
                per_request: (requests > 0).then(|| calls as f64 / requests as f64),
            })
        })
        .collect();
    if calls.is_empty() {
        return None;
    }
    Some(Orchestration { requests, calls })
}

/// The windows `line`'s window `i` is judged against (its marked baseline phase, else its
/// rolling baseline).
fn baseline(line: &Line, i: usize) -> Vec<usize> {
    let Some(w) = line.timeline.windows.get(i) else {
        return Vec::new();
    };
    rolling::baselines_at(&line.timeline, i)
        .for_window(w)
        .map(|b| b.windows.clone())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::timeline::{CalledBy, NetSignals};

    /// A line of `n` 1 s windows on port `port` (processes `pids`): its own answers' first
    /// token `own(i)` ms, and calls from process `caller` answered in `called(i)` ms.
    fn line(
        port: u16,
        pids: &[u32],
        n: usize,
        own: impl Fn(usize) -> f64,
        called: Option<(u32, &dyn Fn(usize) -> f64)>,
    ) -> Line {
        let key = ServerKey::Listener { port, netns: None };
        let mut l = Line::new(key, pids.to_vec(), None, 0, 1000);
        for i in 0..n {
            let at = i as u64 * 1000 + 500;
            l.timeline.at(at).net = Some(NetSignals {
                exchanges: 10,
                server_first_token_p50_ms: Some(own(i)),
                callers: called
                    .iter()
                    .map(|(tgid, f)| CalledBy {
                        tgid: *tgid,
                        exchanges: 10,
                        first_token_p50_ms: Some(f(i)),
                    })
                    .collect(),
                ..NetSignals::default()
            });
            l.close(at, 100);
        }
        l
    }

    #[test]
    fn the_called_server_whose_answers_slowed_holds_the_gateways_rise() {
        // Calm for 8 windows, then the gateway's answers take 500 ms more: 450 of them in
        // the chat server's answers to its calls, none in the search server's.
        let slow = |base: f64, more: f64| move |i: usize| if i < 8 { base } else { base + more };
        let gateway = line(8000, &[10], 9, slow(100.0, 500.0), None);
        let chat = line(
            8001,
            &[11],
            9,
            slow(60.0, 450.0),
            Some((10, &slow(60.0, 450.0))),
        );
        let search = line(8002, &[12], 9, slow(5.0, 0.0), Some((10, &slow(5.0, 0.0))));
        // A server another gateway calls is no hop of this one.
        let other = line(
            8003,
            &[13],
            9,
            slow(5.0, 900.0),
            Some((99, &slow(5.0, 900.0))),
        );
        let lines: BTreeMap<ServerKey, Line> = [gateway, chat, search, other]
            .into_iter()
            .map(|l| (l.key.clone(), l))
            .collect();
        let g = &lines[&ServerKey::Listener {
            port: 8000,
            netns: None,
        }];
        let h = of_window(&lines, g, 8500, Cause::Unexplained).unwrap();
        assert_eq!(h.holder.as_deref(), Some("port:8001"), "{h:?}");
        let hops: Vec<&str> = h.parts.iter().map(|p| p.hop.as_str()).collect();
        assert_eq!(hops, ["port:8001", "port:8002", hops::ORCHESTRATION]);
        assert!((h.rise_ms - 500.0).abs() < 1e-9);
        assert!((h.parts[2].part_ms - 50.0).abs() < 1e-9, "{h:?}");
        // A calm window has no rise to split; a window judged `none` names no holder.
        assert!(of_window(&lines, g, 7500, Cause::Unexplained).is_none());
        assert_eq!(
            of_window(&lines, g, 8500, Cause::None).unwrap().holder,
            None
        );
        // The gateway's calls per request it answered: 10 of each, its own 10 answers; the
        // server another process calls is none of its hops.
        let o = orchestration(&lines, g, 8500).unwrap();
        let per: Vec<(&str, Option<f64>)> = o
            .calls
            .iter()
            .map(|c| (c.hop.as_str(), c.per_request))
            .collect();
        assert_eq!(per, [("port:8001", Some(1.0)), ("port:8002", Some(1.0))]);
        assert_eq!(o.requests, 10);
        // A server that called nobody has no hops.
        let search = &lines[&ServerKey::Listener {
            port: 8002,
            netns: None,
        }];
        assert!(of_window(&lines, search, 8500, Cause::Unexplained).is_none());
        assert!(orchestration(&lines, search, 8500).is_none());
    }
}

//! Agentic sessions (`request.session`): what each LLM call of a session was
//! ([`SessionCall`] in `record.rs`, carried by its [`RequestRecord`]), what each whole session did
//! ([`SessionRecord`]), the per-phase aggregates the tally keeps ([`Samples`]) and the
//! report's view ([`SessionsView`]).
//!
//! A session's time is cut along its critical path (the main agent, and at each join the
//! sub-agent that finished last) into `model` (its LLM calls, from each one's send to its
//! last token), `tools` (tool waits and tool endpoints), `think` and `client` (the rest: the
//! session's send lag, caps, the client between steps). The four add up to the session's
//! end-to-end time by construction; shares are ratios of sums over the same sessions.
//!
//! [`SessionCall`]: super::record::SessionCall

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::{
    record::RequestRecord,
    summary::{Summary, decode_hist, encode_hist, summarize},
};
use crate::quantile::new_hist;

/// How a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionOutcome {
    /// Every step ran.
    Completed,
    /// A call or a tool endpoint failed: the session stopped there.
    Failed,
    /// The phase ended (or a cap dropped a call, or the run stopped) before it was done: not
    /// in the latency and time figures.
    Cut,
}

/// The parts of a session's end-to-end time, µs (they add up to it).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct Parts {
    /// LLM calls on the critical path, each from its send to its last token.
    pub model_us: u64,
    /// Tool waits and tool endpoint calls on the critical path.
    pub tools_us: u64,
    /// Think steps on the critical path.
    pub think_us: u64,
    /// The rest: the session's send lag, caps, the client between steps and joins.
    pub client_us: u64,
}

/// One session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SessionRecord {
    /// Its id (the calls' `session.id`).
    pub id: u64,
    /// Index of its phase.
    pub phase: u32,
    /// Its arrival: when it was due (µs since the run's start).
    pub intended_us: u64,
    /// When its last step ended (µs since the run's start).
    pub end_us: u64,
    /// How it ended.
    pub outcome: SessionOutcome,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// LLM calls (turns) of all its agents, compaction calls included.
    pub calls: u32,
    /// Tool calls of all its agents.
    pub tool_calls: u32,
    /// Sub-agents it started (at any depth).
    pub subagents: u32,
    /// Compactions of its agents' contexts.
    pub compactions: u32,
    /// Prompt tokens of its calls, as the server counted them (`usage.prompt_tokens`).
    pub input_tokens: u64,
    /// Output tokens of its calls.
    pub output_tokens: u64,
    /// The longest context one of its calls sent (client tokens).
    pub max_context_tokens: u32,
    /// Its end-to-end time cut into parts.
    pub parts: Parts,
}

impl SessionRecord {
    /// End-to-end time from its arrival, µs.
    #[must_use]
    pub fn e2e_us(&self) -> u64 {
        self.end_us.saturating_sub(self.intended_us)
    }

    /// Bytes it holds in memory, estimated (the records' budget counts it).
    #[must_use]
    pub fn footprint(&self) -> usize {
        std::mem::size_of::<Self>() + self.error.as_ref().map_or(0, String::capacity)
    }
}

/// The calls of one depth.
#[derive(Debug, Clone)]
pub struct DepthSamples {
    /// Calls that finished.
    pub calls: u64,
    /// TTFT of those that succeeded, µs.
    pub ttft: Histogram<u64>,
    /// Their gaps between tokens, µs.
    pub itl: Histogram<u64>,
    /// Their context lengths, tokens.
    pub context: Histogram<u64>,
}

impl Default for DepthSamples {
    fn default() -> Self {
        Self {
            calls: 0,
            ttft: new_hist(),
            itl: new_hist(),
            context: new_hist(),
        }
    }
}

/// The per-session series, in the view's `histograms` order.
const SERIES: [&str; 8] = [
    "e2e",
    "turns",
    "input_tokens",
    "output_tokens",
    "model",
    "tools",
    "think",
    "client",
];

/// A phase's session aggregates, fed one call record and one session at a time.
#[derive(Debug, Clone)]
pub struct Samples {
    /// Sessions by outcome: completed, failed, cut.
    pub ended: [u64; 3],
    /// Per completed session: [`SERIES`] (times in µs, the others in their units).
    series: [Histogram<u64>; SERIES.len()],
    /// Sums over completed sessions: E2E, model, tools, think, client (µs).
    sums: [u64; 5],
    /// Tool calls, sub-agents and compactions of every session that ended.
    pub tool_calls: u64,
    /// Sub-agents started.
    pub subagents: u64,
    /// Compactions.
    pub compactions: u64,
    /// Calls by depth.
    pub depth: BTreeMap<u32, DepthSamples>,
    /// The sessions kept for the report (within the records' budget).
    pub records: Vec<SessionRecord>,
}

impl Default for Samples {
    fn default() -> Self {
        Self {
            ended: [0; 3],
            series: SERIES.map(|_| new_hist()),
            sums: [0; 5],
            tool_calls: 0,
            subagents: 0,
            compactions: 0,
            depth: BTreeMap::new(),
            records: Vec::new(),
        }
    }
}

impl Samples {
    /// Adds one finished call (a record with `session`; others are ignored).
    pub fn observe_call(&mut self, r: &RequestRecord) {
        let Some(call) = r.session else {
            return;
        };
        let d = self.depth.entry(call.depth).or_default();
        d.calls += 1;
        d.context
            .saturating_record(u64::from(call.context_tokens).max(1));
        if r.error.is_none() {
            if let Some(t) = r.ttft_us() {
                d.ttft.saturating_record(t.max(1));
            }
            for gap in r.itl_us() {
                d.itl.saturating_record(gap.max(1));
            }
        }
    }

    /// Adds one ended session; `keep` keeps its record for the report.
    pub fn observe(&mut self, s: SessionRecord, keep: bool) {
        self.ended[s.outcome as usize] += 1;
        self.tool_calls += u64::from(s.tool_calls);
        self.subagents += u64::from(s.subagents);
        self.compactions += u64::from(s.compactions);
        if s.outcome == SessionOutcome::Completed {
            let p = s.parts;
            let values = [
                s.e2e_us(),
                u64::from(s.calls),
                s.input_tokens,
                s.output_tokens,
                p.model_us,
                p.tools_us,
                p.think_us,
                p.client_us,
            ];
            for (h, v) in self.series.iter_mut().zip(values) {
                h.saturating_record(v.max(1));
            }
            for (sum, v) in self.sums.iter_mut().zip([
                s.e2e_us(),
                p.model_us,
                p.tools_us,
                p.think_us,
                p.client_us,
            ]) {
                *sum += v;
            }
        }
        if keep {
            self.records.push(s);
        }
    }

    /// The report's view; `None` when the phase ran no session.
    #[must_use]
    pub fn view(&self) -> Option<SessionsView> {
        let [completed, failed, cut] = self.ended;
        if completed + failed + cut == 0 {
            return None;
        }
        let ms = |i: usize| summarize(&self.series[i], 1000.0);
        let e2e = self.sums[0].max(1) as f64;
        let part = |i: usize| PartView {
            ms: ms(i + 4),
            sum_us: self.sums[i + 1],
            share_of_e2e: self.sums[i + 1] as f64 / e2e,
        };
        Some(SessionsView {
            sessions: completed + failed + cut,
            completed,
            failed,
            cut,
            e2e_ms: ms(0),
            e2e_sum_us: self.sums[0],
            turns: summarize(&self.series[1], 1.0),
            input_tokens: summarize(&self.series[2], 1.0),
            output_tokens: summarize(&self.series[3], 1.0),
            model: part(0),
            tools: part(1),
            think: part(2),
            client: part(3),
            tool_calls: self.tool_calls,
            subagents: self.subagents,
            compactions: self.compactions,
            depth: self
                .depth
                .iter()
                .map(|(d, s)| {
                    let view = DepthView {
                        calls: s.calls,
                        ttft_ms: summarize(&s.ttft, 1000.0),
                        itl_ms: summarize(&s.itl, 1000.0),
                        context_tokens: summarize(&s.context, 1.0),
                        histograms: [("ttft", &s.ttft), ("itl", &s.itl), ("context", &s.context)]
                            .into_iter()
                            .map(|(n, h)| (n.to_owned(), encode_hist(h)))
                            .collect(),
                    };
                    (d.to_string(), view)
                })
                .collect(),
            histograms: SERIES
                .iter()
                .zip(&self.series)
                .map(|(n, h)| ((*n).to_owned(), encode_hist(h)))
                .collect(),
            records: self.records.clone(),
        })
    }

    /// Adds a reported view (another shard's) into these aggregates, exactly.
    pub fn add_view(&mut self, v: &SessionsView) -> Result<(), String> {
        let add = |h: &mut Histogram<u64>, enc: Option<&String>, what: &str| {
            let enc = enc.ok_or_else(|| format!("sessions: histogram `{what}` is missing"))?;
            let got = decode_hist(enc).map_err(|e| format!("sessions `{what}`: {e}"))?;
            h.add(&got).map_err(|e| format!("sessions `{what}`: {e:?}"))
        };
        for (name, h) in SERIES.iter().zip(&mut self.series) {
            add(h, v.histograms.get(*name), name)?;
        }
        for (i, p) in [&v.model, &v.tools, &v.think, &v.client].iter().enumerate() {
            self.sums[i + 1] += p.sum_us;
        }
        self.sums[0] += v.e2e_sum_us;
        for (i, n) in [v.completed, v.failed, v.cut].into_iter().enumerate() {
            self.ended[i] += n;
        }
        self.tool_calls += v.tool_calls;
        self.subagents += v.subagents;
        self.compactions += v.compactions;
        for (d, dv) in &v.depth {
            let depth: u32 = d
                .parse()
                .map_err(|_| format!("sessions: depth `{d}` is not a number"))?;
            let s = self.depth.entry(depth).or_default();
            s.calls += dv.calls;
            for (name, h) in [
                ("ttft", &mut s.ttft),
                ("itl", &mut s.itl),
                ("context", &mut s.context),
            ] {
                add(h, dv.histograms.get(name), &format!("depth {d} {name}"))?;
            }
        }
        self.records.extend(v.records.iter().cloned());
        Ok(())
    }
}

/// One part of the sessions' time.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct PartView {
    /// Per completed session (ms).
    pub ms: Summary,
    /// Its sum over them, µs (what the share is made of; merged exactly).
    pub sum_us: u64,
    /// Its sum over the sum of their E2E: the four parts' shares add up to 1.
    pub share_of_e2e: f64,
}

/// The calls of one depth in the report.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct DepthView {
    /// Calls that finished (ok or not).
    pub calls: u64,
    /// TTFT of those that succeeded, from each call's due time (ms).
    pub ttft_ms: Summary,
    /// Gaps between their tokens (ms).
    pub itl_ms: Summary,
    /// Their context lengths (client tokens).
    pub context_tokens: Summary,
    /// Base64 `HdrHistogram` V2 of `ttft` and `itl` (µs) and `context` (tokens).
    pub histograms: BTreeMap<String, String>,
}

/// A phase's agentic sessions (`request.session`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct SessionsView {
    /// Sessions that ended: completed, failed or cut.
    pub sessions: u64,
    /// Ran every step.
    pub completed: u64,
    /// Stopped by a failed call or tool.
    pub failed: u64,
    /// Not done when the phase ended (or a cap dropped a call): left out of the figures below.
    pub cut: u64,
    /// End-to-end time of the completed sessions, from their arrival (ms).
    pub e2e_ms: Summary,
    /// Sum of their E2E, µs.
    pub e2e_sum_us: u64,
    /// LLM calls per completed session (all agents, compaction calls included).
    pub turns: Summary,
    /// Prompt tokens per completed session (the server's count, summed over its calls).
    pub input_tokens: Summary,
    /// Output tokens per completed session.
    pub output_tokens: Summary,
    /// Time in LLM calls on the critical path.
    pub model: PartView,
    /// Time in tools on the critical path.
    pub tools: PartView,
    /// Think time on the critical path.
    pub think: PartView,
    /// The rest: send lag, caps, the client between steps and joins.
    pub client: PartView,
    /// Tool calls of the sessions that ended.
    pub tool_calls: u64,
    /// Sub-agents they started.
    pub subagents: u64,
    /// Compactions of their contexts.
    pub compactions: u64,
    /// The calls by depth (`"0"`: the main agents', `"1"`: their sub-agents', ...).
    pub depth: BTreeMap<String, DepthView>,
    /// Base64 `HdrHistogram` V2 per completed session: `e2e`, `model`, `tools`, `think`,
    /// `client` (µs), `turns`, `input_tokens`, `output_tokens`.
    pub histograms: BTreeMap<String, String>,
    /// Each session, within the records' budget (none with `--no-records`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub records: Vec<SessionRecord>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::record::{Endpoint, SessionCall};

    fn session(
        id: u64,
        outcome: SessionOutcome,
        e2e: u64,
        model: u64,
        tools: u64,
    ) -> SessionRecord {
        SessionRecord {
            id,
            phase: 0,
            intended_us: 1_000,
            end_us: 1_000 + e2e,
            outcome,
            error: None,
            calls: 3,
            tool_calls: 1,
            subagents: 2,
            compactions: 0,
            input_tokens: 300,
            output_tokens: 30,
            max_context_tokens: 120,
            parts: Parts {
                model_us: model,
                tools_us: tools,
                think_us: 0,
                client_us: e2e - model - tools,
            },
        }
    }

    #[test]
    fn shares_add_up_calls_go_by_depth_and_views_merge_exactly() {
        let mut a = Samples::default();
        a.observe(
            session(1, SessionOutcome::Completed, 100_000, 60_000, 30_000),
            true,
        );
        a.observe(
            session(2, SessionOutcome::Completed, 300_000, 200_000, 90_000),
            false,
        );
        a.observe(session(3, SessionOutcome::Cut, 50_000, 10_000, 0), true);
        for (i, depth) in [0, 1, 1].into_iter().enumerate() {
            let mut r = RequestRecord::new(i as u64, 0, Endpoint::Chat, 0);
            r.token_us = vec![20_000, 25_000, 31_000];
            r.end_us = 31_000;
            r.session = Some(SessionCall {
                id: 1,
                agent: depth,
                depth,
                context_tokens: 100 * (i as u32 + 1),
                compaction: false,
            });
            a.observe_call(&r);
        }
        a.observe_call(&RequestRecord::new(9, 0, Endpoint::Chat, 0));
        let v = a.view().unwrap();
        assert_eq!((v.sessions, v.completed, v.cut), (3, 2, 1));
        assert_eq!(v.records.len(), 2);
        assert!((v.model.share_of_e2e - 0.65).abs() < 1e-12);
        assert!((v.tools.share_of_e2e - 0.3).abs() < 1e-12);
        let total = v.model.share_of_e2e
            + v.tools.share_of_e2e
            + v.think.share_of_e2e
            + v.client.share_of_e2e;
        assert!((total - 1.0).abs() < 1e-12, "{total}");
        assert_eq!(v.e2e_ms.count, 2);
        assert!((v.turns.p50 - 3.0).abs() < 1e-9);
        assert_eq!((v.depth["0"].calls, v.depth["1"].calls), (1, 2));
        assert!((v.depth["1"].ttft_ms.p50 - 20.0).abs() < 0.1);
        assert!((v.depth["1"].context_tokens.max - 300.0).abs() < 1.0);
        assert_eq!(v.subagents, 6);
        let mut m = Samples::default();
        m.add_view(&v).unwrap();
        m.add_view(&v).unwrap();
        let merged = m.view().unwrap();
        assert_eq!(
            (merged.sessions, merged.completed, merged.records.len()),
            (6, 4, 4)
        );
        assert_eq!(merged.depth["1"].calls, 4);
        assert!((merged.model.share_of_e2e - 0.65).abs() < 1e-12);
        assert_eq!(merged.e2e_ms.count, 4);
    }
}

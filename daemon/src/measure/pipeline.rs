//! Client-orchestrated pipelines (`request.pipeline`): what each step of a task did
//! ([`StepRecord`] in `record.rs`, carried by the task's [`RequestRecord`]), the per-phase aggregates the
//! tally keeps of them ([`Samples`]) and the report's view ([`PipelineView`]): every step's
//! latency, its share of the task's E2E, how often its fallback fired, the final chat's TTFT
//! and the tool-call chain depth.
//!
//! Shares are ratios of sums over the same tasks (the time of a step over the tasks' E2E),
//! so the steps' shares and the rest (`other_share_of_e2e`: send lag and the client's own
//! time between steps) add up to 1 by construction.
//!
//! [`StepRecord`]: super::record::StepRecord

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::{
    record::{RequestRecord, StepKind, StepOutcome},
    summary::{Summary, decode_hist, encode_hist, summarize},
};
use crate::quantile::new_hist;

/// Aggregates of one step over a phase's tasks.
#[derive(Debug, Clone)]
pub struct StepSamples {
    /// Step latency, µs (every run of the step, whatever its outcome).
    pub latency: Histogram<u64>,
    /// Times it ran (was not `skipped`).
    pub ran: u64,
    /// Ended ok.
    pub ok: u64,
    /// Its fallback stood in.
    pub fallbacks: u64,
    /// Failed the task.
    pub failed: u64,
    /// Not sent: nothing to do.
    pub skipped: u64,
    /// HTTP exchanges.
    pub calls: u64,
    /// Sum of its latencies, µs (for its share of E2E).
    pub sum_us: u64,
}

impl Default for StepSamples {
    fn default() -> Self {
        Self {
            latency: new_hist(),
            ran: 0,
            ok: 0,
            fallbacks: 0,
            failed: 0,
            skipped: 0,
            calls: 0,
            sum_us: 0,
        }
    }
}

/// A phase's pipeline aggregates, fed one task record at a time.
#[derive(Debug, Clone)]
pub struct Samples {
    /// Per step kind.
    pub steps: BTreeMap<StepKind, StepSamples>,
    /// TTFT of each task's final chat request from its send, µs.
    pub final_ttft: Histogram<u64>,
    /// Tasks by tool-call chain depth.
    pub depth: BTreeMap<u32, u64>,
    /// Tasks seen.
    pub tasks: u64,
    /// Sum of their E2E, µs.
    pub e2e_sum_us: u64,
}

impl Default for Samples {
    fn default() -> Self {
        Self {
            steps: BTreeMap::new(),
            final_ttft: new_hist(),
            depth: BTreeMap::new(),
            tasks: 0,
            e2e_sum_us: 0,
        }
    }
}

impl Samples {
    /// Adds one task (a record with steps; others are ignored).
    pub fn observe(&mut self, r: &RequestRecord) {
        if r.steps.is_empty() {
            return;
        }
        self.tasks += 1;
        self.e2e_sum_us += r.e2e_us();
        for s in &r.steps {
            let agg = self.steps.entry(s.kind).or_default();
            agg.calls += u64::from(s.calls);
            match s.outcome {
                StepOutcome::Skipped => {
                    agg.skipped += 1;
                    continue;
                }
                StepOutcome::Ok => agg.ok += 1,
                StepOutcome::Fallback => agg.fallbacks += 1,
                StepOutcome::Failed => agg.failed += 1,
            }
            agg.ran += 1;
            agg.sum_us += s.latency_us();
            agg.latency.saturating_record(s.latency_us().max(1));
        }
        if let Some(t) = r.steps.iter().rev().find_map(|s| s.ttft_us) {
            self.final_ttft.saturating_record(t.max(1));
        }
        if let Some(d) = r.tool_depth {
            *self.depth.entry(d).or_default() += 1;
        }
    }

    /// The report's view; `None` when the phase ran no pipeline task.
    #[must_use]
    pub fn view(&self) -> Option<PipelineView> {
        if self.tasks == 0 {
            return None;
        }
        let e2e = self.e2e_sum_us.max(1) as f64;
        let steps: Vec<StepView> = self
            .steps
            .iter()
            .map(|(kind, s)| StepView {
                step: *kind,
                ran: s.ran,
                ok: s.ok,
                fallbacks: s.fallbacks,
                fallback_rate: if s.ran == 0 {
                    0.0
                } else {
                    s.fallbacks as f64 / s.ran as f64
                },
                failed: s.failed,
                skipped: s.skipped,
                calls: s.calls,
                latency_ms: summary_ms(&s.latency),
                share_of_e2e: s.sum_us as f64 / e2e,
                sum_us: s.sum_us,
                histogram: encode_hist(&s.latency),
            })
            .collect();
        let shares: f64 = steps.iter().map(|s| s.share_of_e2e).sum();
        Some(PipelineView {
            tasks: self.tasks,
            e2e_sum_us: self.e2e_sum_us,
            other_share_of_e2e: (1.0 - shares).max(0.0),
            final_chat_ttft_ms: summary_ms(&self.final_ttft),
            final_chat_ttft_histogram: encode_hist(&self.final_ttft),
            tool_depth: self
                .depth
                .iter()
                .map(|(d, n)| (d.to_string(), *n))
                .collect(),
            steps,
        })
    }

    /// Adds a reported view (another shard's) into these aggregates, exactly.
    pub fn add_view(&mut self, v: &PipelineView) -> Result<(), String> {
        self.tasks += v.tasks;
        self.e2e_sum_us += v.e2e_sum_us;
        let h = decode_hist(&v.final_chat_ttft_histogram)
            .map_err(|e| format!("pipeline final chat TTFT: {e}"))?;
        self.final_ttft
            .add(&h)
            .map_err(|e| format!("pipeline final chat TTFT: {e:?}"))?;
        for (d, n) in &v.tool_depth {
            let d: u32 = d
                .parse()
                .map_err(|_| format!("pipeline tool depth `{d}` is not a number"))?;
            *self.depth.entry(d).or_default() += n;
        }
        for s in &v.steps {
            let agg = self.steps.entry(s.step).or_default();
            let h = decode_hist(&s.histogram)
                .map_err(|e| format!("pipeline step {}: {e}", s.step.name()))?;
            agg.latency
                .add(&h)
                .map_err(|e| format!("pipeline step {}: {e:?}", s.step.name()))?;
            agg.ran += s.ran;
            agg.ok += s.ok;
            agg.fallbacks += s.fallbacks;
            agg.failed += s.failed;
            agg.skipped += s.skipped;
            agg.calls += s.calls;
            agg.sum_us += s.sum_us;
        }
        Ok(())
    }
}

fn summary_ms(h: &Histogram<u64>) -> Summary {
    summarize(h, 1000.0)
}

/// One step of a phase's pipeline in the report.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct StepView {
    /// The step.
    pub step: StepKind,
    /// Times it ran (sent, whatever the outcome).
    pub ran: u64,
    /// Ended ok.
    pub ok: u64,
    /// Its fallback stood in (it failed or passed its deadline).
    pub fallbacks: u64,
    /// `fallbacks / ran`.
    pub fallback_rate: f64,
    /// Failed without a fallback (each failed its task).
    pub failed: u64,
    /// Not sent: nothing to do (a re-rank of no documents).
    pub skipped: u64,
    /// HTTP exchanges it made (a `tools` step: tool calls and chat continuations).
    pub calls: u64,
    /// Its latency (ms), from its start to its answer, failure or deadline.
    pub latency_ms: Summary,
    /// Its time over the tasks' E2E (sums over the phase's tasks).
    pub share_of_e2e: f64,
    /// Sum of its latencies, µs (what the share is made of; merged exactly).
    pub sum_us: u64,
    /// Base64 `HdrHistogram` V2 of its latency, µs.
    pub histogram: String,
}

/// A phase's client-orchestrated pipeline (`request.pipeline`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct PipelineView {
    /// Tasks that ran (finished, ok or not).
    pub tasks: u64,
    /// Sum of their E2E (from each task's intended start), µs.
    pub e2e_sum_us: u64,
    /// The steps, in pipeline order.
    pub steps: Vec<StepView>,
    /// What the steps' shares leave of E2E: send lag and the client's time between steps.
    pub other_share_of_e2e: f64,
    /// TTFT of each task's final chat request, from that request's send (ms).
    pub final_chat_ttft_ms: Summary,
    /// Base64 `HdrHistogram` V2 of the final chat's TTFT, µs.
    pub final_chat_ttft_histogram: String,
    /// Tasks by tool-call chain depth (`"0"`: the chat answered without calling a tool).
    pub tool_depth: BTreeMap<String, u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::record::{Endpoint, StepRecord};

    fn step(kind: StepKind, start: u64, end: u64, outcome: StepOutcome) -> StepRecord {
        StepRecord {
            kind,
            start_us: start,
            end_us: end,
            outcome,
            calls: 1,
            error: None,
            error_message: None,
            ttft_us: (kind == StepKind::Chat).then_some(5_000),
        }
    }

    #[test]
    fn shares_add_up_and_views_merge_exactly() {
        let mut a = Samples::default();
        for i in 0..4u64 {
            let mut r = RequestRecord::new(i, 0, Endpoint::Chat, 0);
            r.end_us = 100_000;
            r.tool_depth = Some(u32::from(i % 2 == 0));
            r.steps = vec![
                step(StepKind::Embed, 0, 10_000, StepOutcome::Ok),
                step(
                    StepKind::Search,
                    10_000,
                    30_000,
                    if i == 0 {
                        StepOutcome::Fallback
                    } else {
                        StepOutcome::Ok
                    },
                ),
                step(StepKind::Chat, 30_000, 90_000, StepOutcome::Ok),
            ];
            a.observe(&r);
        }
        let v = a.view().unwrap();
        assert_eq!(v.tasks, 4);
        let search = v.steps.iter().find(|s| s.step == StepKind::Search).unwrap();
        assert_eq!((search.ran, search.fallbacks), (4, 1));
        assert!((search.fallback_rate - 0.25).abs() < 1e-12);
        assert!((search.share_of_e2e - 0.2).abs() < 1e-12);
        let total: f64 = v.steps.iter().map(|s| s.share_of_e2e).sum::<f64>() + v.other_share_of_e2e;
        assert!((total - 1.0).abs() < 1e-9, "{total}");
        assert!((v.other_share_of_e2e - 0.1).abs() < 1e-9);
        assert_eq!(v.tool_depth.get("1"), Some(&2));
        assert!((v.final_chat_ttft_ms.p50 - 5.0).abs() < 0.01);
        let mut m = Samples::default();
        m.add_view(&v).unwrap();
        m.add_view(&v).unwrap();
        let merged = m.view().unwrap();
        assert_eq!(merged.tasks, 8);
        assert_eq!(merged.tool_depth.get("0"), Some(&4));
        let s = merged
            .steps
            .iter()
            .find(|s| s.step == StepKind::Search)
            .unwrap();
        assert_eq!((s.ran, s.fallbacks, s.latency_ms.count), (8, 2, 8));
        assert!((s.share_of_e2e - 0.2).abs() < 1e-12);
    }
}

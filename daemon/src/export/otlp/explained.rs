//! An explained run's request spans (`stress --explain` with an OTLP endpoint): the report's
//! sampled requests (its waterfalls: each phase's slowest by E2E and by TTFT, and an even
//! sample of the run), sent once the verdicts are known, each with
//!
//! - the client's stages, as a live export gives them (`loadgen.send_lag`, ...);
//! - the kernel's stages of it where the request was joined with the server's exchange
//!   (`kernel.to_server`: sent -> the server read it; `kernel.server_first_token`: read -> the
//!   server wrote its first token; `kernel.to_client`: that write -> the client read it;
//!   `kernel.server_response`: read -> the server's last write), and the server's run-queue
//!   delay and GPU sync time over it (`inferscope.kernel.runq_delay_ms`,
//!   `inferscope.kernel.gpu_sync_ms`: prorated from its windows, estimates);
//! - the verdict of the window it was sent in (`inferscope.verdict`,
//!   `inferscope.verdict.confidence`) and why it was sampled (`inferscope.sample`).

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use super::{SampledRequest, Stage, live::RunLabels, live::sampled_request};
use crate::attribute::WindowVerdict;
use crate::collect::catalog::Labels;
use crate::export::report::{Report, waterfall::Waterfall};
use crate::loadgen::{Plan, StressReport};

/// The report's sampled requests of `lg`'s run (of `plan`) as the exporter takes them, in
/// the report's order; a waterfall whose record the run did not keep is left out.
#[must_use]
pub fn requests(plan: &Plan, lg: &StressReport, report: &Report) -> Vec<(SampledRequest, Labels)> {
    let mut labels = RunLabels::new(plan.scenario());
    labels.resolve_models(plan.scenario(), plan.models().get());
    let start = SystemTime::UNIX_EPOCH + Duration::from_nanos(lg.started_unix_ns);
    let records: HashMap<u64, _> = lg.records.iter().map(|r| (r.id, r)).collect();
    report
        .waterfalls
        .iter()
        .filter_map(|w| {
            let r = records.get(&w.request_id)?;
            let mut req = sampled_request(r, start);
            req.gen_ai = labels.call(r);
            let sent = start + Duration::from_micros(r.intended_us);
            req.stages.extend(kernel_stages(w, sent));
            req.attributes.extend(kernel_attributes(w));
            if let Some(v) = window_of(&report.verdicts, report.timeline.len_ms, w) {
                req.verdict = Some(v.verdict.cause.to_string());
                req.attributes.push((
                    super::VERDICT_CONFIDENCE.to_owned(),
                    format!("{:.2}", v.verdict.confidence),
                ));
            }
            Some((req, labels.of(r)))
        })
        .collect()
}

/// The kernel's stages of `w`, its offsets counted from `intended` (the request's intended
/// start on the wall clock); a stage without both ends, or that runs backwards, is left out.
fn kernel_stages(w: &Waterfall, intended: SystemTime) -> Vec<Stage> {
    let at = |ms: f64| intended + Duration::from_secs_f64(ms.max(0.0) / 1000.0);
    [
        ("kernel.to_server", Some(w.sent_ms), w.server_received_ms),
        (
            "kernel.server_first_token",
            w.server_received_ms,
            w.server_first_token_ms,
        ),
        (
            "kernel.to_client",
            w.server_first_token_ms,
            w.client_first_token_ms,
        ),
        (
            "kernel.server_response",
            w.server_received_ms,
            w.server_last_byte_ms,
        ),
    ]
    .into_iter()
    .filter_map(|(name, from, to)| {
        let (from, to) = (from?, to?);
        (to >= from).then(|| Stage {
            name: name.to_owned(),
            start: at(from),
            end: at(to),
        })
    })
    .collect()
}

/// Why `w` was sampled and the server's run-queue delay and GPU sync time over it.
fn kernel_attributes(w: &Waterfall) -> Vec<(String, String)> {
    let sample = serde_json::to_value(w.sample)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned));
    [
        ("inferscope.sample", sample),
        (
            "inferscope.kernel.runq_delay_ms",
            w.runq_delay_ms.map(|v| format!("{v:.3}")),
        ),
        (
            "inferscope.kernel.gpu_sync_ms",
            w.gpu_sync_ms.map(|v| format!("{v:.3}")),
        ),
    ]
    .into_iter()
    .filter_map(|(k, v)| Some((k.to_owned(), v?)))
    .collect()
}

/// The verdict of the window (`len_ms` long) `w` was meant to be sent in.
fn window_of<'a>(
    verdicts: &'a [WindowVerdict],
    len_ms: u64,
    w: &Waterfall,
) -> Option<&'a WindowVerdict> {
    let t = w.intended_start_unix_ms;
    let i = verdicts.partition_point(|v| v.start_unix_ms as f64 <= t);
    let v = verdicts.get(i.checked_sub(1)?)?;
    (t < (v.start_unix_ms + len_ms) as f64).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waterfall() -> Waterfall {
        Waterfall {
            request_id: 3,
            intended_start_unix_ms: 1_000_500.0,
            sent_ms: 1.0,
            server_received_ms: Some(1.5),
            server_first_byte_ms: Some(40.0),
            server_first_token_ms: Some(41.0),
            client_first_token_ms: Some(41.4),
            server_last_byte_ms: Some(90.0),
            end_ms: 90.5,
            runq_delay_ms: Some(2.25),
            ..Waterfall::default()
        }
    }

    #[test]
    fn a_joined_request_gets_the_kernels_four_stages_in_order() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let stages = kernel_stages(&waterfall(), t0);
        let names: Vec<&str> = stages.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "kernel.to_server",
                "kernel.server_first_token",
                "kernel.to_client",
                "kernel.server_response"
            ]
        );
        let ms = |t: SystemTime| t.duration_since(t0).unwrap().as_secs_f64() * 1000.0;
        assert!((ms(stages[1].start) - 1.5).abs() < 1e-6);
        assert!((ms(stages[1].end) - 41.0).abs() < 1e-6);
        // Not joined: no kernel stage at all, the client's stay.
        let alone = Waterfall {
            server_received_ms: None,
            server_first_token_ms: None,
            server_last_byte_ms: None,
            ..waterfall()
        };
        assert!(kernel_stages(&alone, t0).is_empty());
        let attrs = kernel_attributes(&waterfall());
        assert!(attrs.contains(&("inferscope.sample".into(), "uniform".into())));
        assert!(attrs.contains(&("inferscope.kernel.runq_delay_ms".into(), "2.250".into())));
    }

    #[test]
    fn a_request_takes_the_verdict_of_the_window_it_was_meant_to_be_sent_in() {
        let v = |i: usize, start: u64| WindowVerdict {
            index: i,
            start_unix_ms: start,
            phase: None,
            verdict: crate::attribute::Verdict::bare(crate::attribute::Cause::KvCache, 0.9),
            hops: None,
            orchestration: None,
        };
        let verdicts = [v(0, 999_000), v(1, 1_000_000), v(2, 1_001_000)];
        let w = waterfall();
        assert_eq!(window_of(&verdicts, 1000, &w).map(|v| v.index), Some(1));
        let before = Waterfall {
            intended_start_unix_ms: 10.0,
            ..w.clone()
        };
        assert!(window_of(&verdicts, 1000, &before).is_none());
        let after = Waterfall {
            intended_start_unix_ms: 1_002_000.0,
            ..w
        };
        assert!(window_of(&verdicts, 1000, &after).is_none());
    }
}

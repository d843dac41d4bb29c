//! What went wrong, in words, after a run: one line per error class with its count and the
//! first such request's message (a TLS handshake that fails fails every request the same way,
//! and one line says why), and whether nothing succeeded at all.

use std::{collections::BTreeMap, fmt};

use super::{
    record::ErrorClass,
    report::{PhaseReport, StressReport},
};

/// The failures of one class over the whole run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassFailures {
    /// The class.
    pub class: ErrorClass,
    /// Requests that failed so.
    pub count: u64,
    /// The first such request's message (when records were kept).
    pub example: Option<String>,
}

impl fmt::Display for ClassFailures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let noun = if self.count == 1 {
            "request"
        } else {
            "requests"
        };
        write!(
            f,
            "{} {noun} failed with `{}` errors",
            self.count,
            self.class.name()
        )?;
        match &self.example {
            Some(m) => write!(f, ", the first: {}", m.replace('\n', " ")),
            None => Ok(()),
        }
    }
}

/// Every error class that occurred, in report order, with its count and first message.
#[must_use]
pub fn by_class(report: &StressReport) -> Vec<ClassFailures> {
    let mut counts: BTreeMap<ErrorClass, u64> = BTreeMap::new();
    for p in &report.phases {
        for (name, n) in &p.counts.errors {
            if let Some(class) = ErrorClass::ALL.into_iter().find(|c| c.name() == name) {
                *counts.entry(class).or_default() += n;
            }
        }
    }
    ErrorClass::ALL
        .into_iter()
        .filter_map(|class| {
            let count = *counts.get(&class)?;
            let example = report
                .records
                .iter()
                .find(|r| r.error == Some(class))
                .and_then(|r| r.error_message.clone());
            Some(ClassFailures {
                class,
                count,
                example,
            })
        })
        .collect()
}

/// Whether requests finished but not one succeeded (aborts the client made on purpose do
/// not count as failures): the run measured nothing about the service.
#[must_use]
pub fn nothing_succeeded(report: &StressReport) -> bool {
    let ok: u64 = report.phases.iter().map(|p| p.counts.ok).sum();
    let failed: u64 = report.phases.iter().map(real_failures).sum();
    ok == 0 && failed > 0
}

fn real_failures(p: &PhaseReport) -> u64 {
    p.counts
        .errors
        .iter()
        .filter(|(name, _)| name.as_str() != ErrorClass::Aborted.name())
        .map(|(_, n)| n)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::record::{Endpoint, RequestRecord};

    fn report(ok: u64, errors: &[(&str, u64)], records: Vec<RequestRecord>) -> StressReport {
        let phase = serde_json::json!({
            "name": "p", "label": "p", "endpoint": "chat", "load_level": "rate=1/s",
            "target_rate": 1.0, "duration_s": 1.0, "elapsed_s": 1.0,
            "counts": {"scheduled": 1, "dropped": 0, "finished": 1, "ok": ok, "good": ok,
                "errors": errors.iter().map(|(k, v)| ((*k).to_string(), *v)).collect::<BTreeMap<_, _>>()},
            "error_rate": 0.0, "requests_per_s": 1.0, "goodput_per_s": 1.0, "output_tokens": 0,
            "output_tokens_per_s": 0.0, "input_tokens": 0, "latency_ms": {},
            "stream_tokens_per_s": {"count": 0, "mean": 0.0, "p50": 0.0, "p90": 0.0,
                "p95": 0.0, "p99": 0.0, "p999": 0.0, "max": 0.0},
            "recall": {"count": 0, "mean": 0.0, "p50": 0.0, "p90": 0.0,
                "p95": 0.0, "p99": 0.0, "p999": 0.0, "max": 0.0},
            "histograms": {}, "slo": []
        });
        let mut r: StressReport = serde_json::from_value(serde_json::json!({
            "schema": "inferscope.stress.report", "version": 1, "scenario": "s",
            "target": "https://127.0.0.1:1", "started_unix_ns": 0, "started_monotonic_ns": 0,
            "elapsed_s": 1.0, "stopped": null, "slo_pass": true, "phases": [phase],
            "events": [], "records": []
        }))
        .unwrap();
        r.records = records;
        r
    }

    #[test]
    fn one_line_per_class_with_the_first_message() {
        let mut rec = RequestRecord::new(0, 0, Endpoint::Chat, 0);
        rec.fail(ErrorClass::Tls, "TLS handshake with h:1 failed: bad");
        let r = report(0, &[("tls", 3), ("timeout", 1)], vec![rec]);
        let lines: Vec<String> = by_class(&r).iter().map(ToString::to_string).collect();
        assert_eq!(
            lines,
            [
                "3 requests failed with `tls` errors, the first: TLS handshake with h:1 failed: bad",
                "1 request failed with `timeout` errors",
            ]
        );
        assert!(nothing_succeeded(&r));
        assert!(!nothing_succeeded(&report(1, &[("tls", 3)], Vec::new())));
        assert!(!nothing_succeeded(&report(
            0,
            &[("aborted", 3)],
            Vec::new()
        )));
        assert!(!nothing_succeeded(&report(0, &[], Vec::new())));
    }
}

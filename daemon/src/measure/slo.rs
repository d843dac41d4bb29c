//! Per-phase SLOs such as `ttft_p95 < 500ms` or `error_rate < 1%`: parsed from the
//! scenario, checked on the phase's aggregates; any failure makes `stress` exit non-zero.
//!
//! Grammar: `METRIC OP VALUE` with OP one of `<`, `<=`, `>`, `>=` and METRIC one of
//! - `ttft|itl|tpot|e2e|send_lag` + `_p50|_p90|_p95|_p99|_p999|_max|_mean`, VALUE a
//!   duration (`250us`, `500ms`, `1.5s`);
//! - `error_rate`, `drop_rate`, `goodput_ratio`: VALUE a percentage (`1%`) or fraction;
//! - `recall` (mean) or `recall_pNN`: percentage or fraction;
//! - `recall_drift` (first window's recall minus the last's) and `recall_min_window` (the
//!   lowest window's recall; index health, `vector/health.rs`): percentage or fraction;
//! - `stream_tokens_per_s_pNN|_mean`, `rps`, `output_tokens_per_s`, `tokens_per_s` (input +
//!   output), `stps` (succeeded tasks per second): a plain number;
//! - `task_success_rate`: percentage or fraction; `ice` (mean) or `ice_pNN`: nats.
//!
//! Latency SLOs with `<`/`<=` on `ttft`, `tpot`, `e2e` or `itl` also define goodput: a
//! request is good when it succeeded and its own TTFT, TPOT, E2E (and largest ITL gap)
//! are within every such threshold (vLLM's `--goodput` semantics).

use serde::Serialize;

use super::record::RequestRecord;

/// A latency series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Series {
    /// Time to first token.
    Ttft,
    /// Inter-token gaps.
    Itl,
    /// Time per output token.
    Tpot,
    /// End to end.
    E2e,
    /// Actual minus intended start.
    SendLag,
}

/// A statistic of a distribution.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Stat {
    /// Quantile in (0, 1].
    Quantile(f64),
    /// Maximum.
    Max,
    /// Mean.
    Mean,
}

/// What an SLO looks at. Latencies are compared in milliseconds, ratios as fractions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Metric {
    /// A latency statistic.
    Latency(Series, Stat),
    /// Failed / finished (intentional chaos aborts excluded).
    ErrorRate,
    /// Dropped / scheduled.
    DropRate,
    /// Good / finished.
    GoodputRatio,
    /// Vector recall@k.
    Recall(Stat),
    /// Recall of the first window minus the last's.
    RecallDrift,
    /// The lowest window's recall.
    RecallMinWindow,
    /// Per-stream decode rate (tokens/s).
    StreamTokensPerS(Stat),
    /// Finished requests per second.
    Rps,
    /// Output tokens per second, all streams together.
    OutputTokensPerS,
    /// Input plus output tokens per second (token QPS).
    TokensPerS,
    /// Succeeded tasks per second (sTPS; see `check.rs`).
    SemanticTasksPerS,
    /// Succeeded / ended tasks.
    TaskSuccessRate,
    /// Inference consistency entropy of conversations (nats).
    Ice(Stat),
}

/// Comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

/// One parsed SLO.
#[derive(Debug, Clone, PartialEq)]
pub struct Slo {
    /// The text as written.
    pub text: String,
    /// Metric.
    pub metric: Metric,
    /// Operator.
    pub op: Op,
    /// Threshold in the metric's unit (ms, fraction or plain number).
    pub threshold: f64,
}

/// The outcome of one SLO for one phase (part of the JSON report).
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, schemars::JsonSchema)]
pub struct SloResult {
    /// The SLO as written.
    pub slo: String,
    /// Observed value in the SLO's unit; `null` when the phase has no such data.
    pub observed: Option<f64>,
    /// The samples a distribution's statistic came from (latencies, recall, stream rates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<u64>,
    /// Set when a percentile had fewer samples than it needs (`confidence.rs`): the samples it
    /// needs. The SLO is then undecided, neither met nor broken, and the gate does not pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples_needed: Option<u64>,
    /// Whether the observed value held (no data counts as a failure: a gate must not pass
    /// blind).
    pub pass: bool,
}

impl SloResult {
    /// The result of `slo` on `observed`, a statistic of `samples` samples where it is one.
    #[must_use]
    pub fn new(slo: &Slo, observed: Option<f64>, samples: Option<u64>) -> Self {
        let samples_needed = match (slo.metric.quantile(), samples) {
            (Some(q), Some(n)) if !super::confidence::enough(q, n) => {
                Some(super::confidence::needed(q))
            }
            _ => None,
        };
        SloResult {
            slo: slo.text.clone(),
            observed,
            samples,
            samples_needed,
            pass: observed.is_some_and(|v| slo.holds(v)),
        }
    }

    /// Whether the gate passes on it: held, on enough samples.
    #[must_use]
    pub fn gate_passes(&self) -> bool {
        self.pass && self.samples_needed.is_none()
    }

    /// Whether a percentile had too few samples to decide it.
    #[must_use]
    pub fn undecided(&self) -> bool {
        self.samples_needed.is_some()
    }
}

impl Metric {
    /// The quantile a percentile SLO reads (`ttft_p99` -> 0.99); `None` for the others.
    #[must_use]
    pub fn quantile(self) -> Option<f64> {
        match self {
            Metric::Latency(_, Stat::Quantile(q))
            | Metric::Recall(Stat::Quantile(q))
            | Metric::StreamTokensPerS(Stat::Quantile(q))
            | Metric::Ice(Stat::Quantile(q)) => Some(q),
            _ => None,
        }
    }
}

/// An SLO that could not be parsed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("bad SLO {text:?}: {why} (example: `ttft_p95 < 500ms`, `error_rate < 1%`)")]
pub struct SloError {
    text: String,
    why: String,
}

impl Slo {
    /// Parses `METRIC OP VALUE`.
    pub fn parse(text: &str) -> Result<Self, SloError> {
        let err = |why: &str| SloError {
            text: text.to_string(),
            why: why.to_string(),
        };
        let (pos, op, len) = ["<=", ">=", "<", ">"]
            .iter()
            .find_map(|o| text.find(o).map(|p| (p, *o, o.len())))
            .ok_or_else(|| err("no comparison operator (<, <=, >, >=)"))?;
        let op = match op {
            "<" => Op::Lt,
            "<=" => Op::Le,
            ">" => Op::Gt,
            _ => Op::Ge,
        };
        let name = text[..pos].trim();
        let value = text[pos + len..].trim();
        let metric = parse_metric(name).ok_or_else(|| err(&format!("unknown metric `{name}`")))?;
        let threshold = match metric {
            Metric::Latency(..) => parse_ms(value),
            Metric::ErrorRate
            | Metric::DropRate
            | Metric::GoodputRatio
            | Metric::TaskSuccessRate
            | Metric::RecallDrift
            | Metric::RecallMinWindow
            | Metric::Recall(_) => parse_ratio(value),
            _ => value.parse::<f64>().ok(),
        }
        .filter(|v| v.is_finite())
        .ok_or_else(|| err(&format!("bad value `{value}` for `{name}`")))?;
        Ok(Slo {
            text: text.trim().to_string(),
            metric,
            op,
            threshold,
        })
    }

    /// Whether `observed` satisfies the SLO.
    #[must_use]
    pub fn holds(&self, observed: f64) -> bool {
        match self.op {
            Op::Lt => observed < self.threshold,
            Op::Le => observed <= self.threshold,
            Op::Gt => observed > self.threshold,
            Op::Ge => observed >= self.threshold,
        }
    }

    /// Per-request check used for goodput; `None` when this SLO is not a per-request one.
    #[must_use]
    pub fn request_ok(&self, r: &RequestRecord) -> Option<bool> {
        let Metric::Latency(series, _) = self.metric else {
            return None;
        };
        if !matches!(self.op, Op::Lt | Op::Le) {
            return None;
        }
        let ms = |us: u64| us as f64 / 1000.0;
        let v = match series {
            Series::Ttft => r.ttft_us().map(ms),
            Series::Tpot => r.tpot_us().map(|u| u / 1000.0),
            Series::E2e => Some(ms(r.e2e_us())),
            Series::Itl => r.itl_us().max().map(ms),
            Series::SendLag => return None,
        };
        // A request without the value (e.g. one token, so no TPOT) is not held against it.
        Some(v.is_none_or(|v| self.holds(v)))
    }
}

fn parse_stat(s: &str) -> Option<Stat> {
    match s {
        "max" | "p100" => Some(Stat::Max),
        "mean" | "avg" => Some(Stat::Mean),
        p => {
            let digits = p.strip_prefix('p')?;
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            // p5 and p95 are percent; p999 means 0.999 and p9999 0.9999.
            let n: f64 = digits.parse().ok()?;
            let q = n / 10f64.powi(digits.len().max(2) as i32);
            (q > 0.0 && q < 1.0).then_some(Stat::Quantile(q))
        }
    }
}

fn parse_metric(name: &str) -> Option<Metric> {
    match name {
        "error_rate" => return Some(Metric::ErrorRate),
        "drop_rate" => return Some(Metric::DropRate),
        "goodput_ratio" => return Some(Metric::GoodputRatio),
        "recall" => return Some(Metric::Recall(Stat::Mean)),
        "recall_drift" => return Some(Metric::RecallDrift),
        "recall_min_window" => return Some(Metric::RecallMinWindow),
        "rps" => return Some(Metric::Rps),
        "output_tokens_per_s" => return Some(Metric::OutputTokensPerS),
        "tokens_per_s" => return Some(Metric::TokensPerS),
        "stps" => return Some(Metric::SemanticTasksPerS),
        "task_success_rate" => return Some(Metric::TaskSuccessRate),
        "ice" => return Some(Metric::Ice(Stat::Mean)),
        _ => {}
    }
    let (base, stat) = name.rsplit_once('_')?;
    let stat = parse_stat(stat)?;
    Some(match base {
        "ttft" => Metric::Latency(Series::Ttft, stat),
        "itl" => Metric::Latency(Series::Itl, stat),
        "tpot" => Metric::Latency(Series::Tpot, stat),
        "e2e" => Metric::Latency(Series::E2e, stat),
        "send_lag" => Metric::Latency(Series::SendLag, stat),
        "recall" => Metric::Recall(stat),
        "stream_tokens_per_s" => Metric::StreamTokensPerS(stat),
        "ice" => Metric::Ice(stat),
        _ => return None,
    })
}

/// `250us`, `500ms`, `1.5s`, `2m` -> milliseconds.
fn parse_ms(v: &str) -> Option<f64> {
    let split = v.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (num, unit) = v.split_at(split);
    let n: f64 = num.parse().ok()?;
    let mul = match unit.trim() {
        "us" | "µs" => 0.001,
        "ms" => 1.0,
        "s" => 1000.0,
        "m" | "min" => 60_000.0,
        _ => return None,
    };
    Some(n * mul)
}

fn parse_ratio(v: &str) -> Option<f64> {
    match v.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().ok().map(|p| p / 100.0),
        None => v.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_seed_examples() {
        let s = Slo::parse("ttft_p95 < 500ms").unwrap();
        assert_eq!(
            s.metric,
            Metric::Latency(Series::Ttft, Stat::Quantile(0.95))
        );
        assert_eq!((s.op, s.threshold), (Op::Lt, 500.0));
        let s = Slo::parse("error_rate<1%").unwrap();
        assert_eq!((s.metric, s.threshold), (Metric::ErrorRate, 0.01));
        let s = Slo::parse("e2e_p999 <= 1.5s").unwrap();
        assert_eq!(
            s.metric,
            Metric::Latency(Series::E2e, Stat::Quantile(0.999))
        );
        assert!((s.threshold - 1500.0).abs() < 1e-9);
        let s = Slo::parse("stream_tokens_per_s_p10 >= 15").unwrap();
        assert_eq!((s.op, s.threshold), (Op::Ge, 15.0));
        assert_eq!(
            Slo::parse("recall >= 0.9").unwrap().metric,
            Metric::Recall(Stat::Mean)
        );
        assert!(s.holds(15.0) && !s.holds(14.9));
        let s = Slo::parse("recall_min_window >= 92%").unwrap();
        assert_eq!((s.metric, s.threshold), (Metric::RecallMinWindow, 0.92));
        assert_eq!(
            Slo::parse("recall_drift < 0.05").unwrap().metric,
            Metric::RecallDrift
        );
    }

    #[test]
    fn rejects_bad_slos_with_reason() {
        let e = Slo::parse("ttft_p95 500ms").unwrap_err().to_string();
        assert!(e.contains("no comparison operator"), "{e}");
        let e = Slo::parse("latency_p95 < 5ms").unwrap_err().to_string();
        assert!(e.contains("unknown metric `latency_p95`"), "{e}");
        let e = Slo::parse("ttft_p95 < 5 parsecs").unwrap_err().to_string();
        assert!(e.contains("bad value"), "{e}");
        assert!(Slo::parse("ttft_p0 < 5ms").is_err());
    }

    #[test]
    fn per_request_goodput_check() {
        use crate::measure::record::{Endpoint, RequestRecord};
        let mut r = RequestRecord::new(0, 0, Endpoint::Chat, 1000);
        r.token_us = vec![301_000, 311_000];
        r.end_us = 311_000;
        r.output_tokens = Some(2);
        assert_eq!(
            Slo::parse("ttft_p99 < 400ms").unwrap().request_ok(&r),
            Some(true)
        );
        assert_eq!(
            Slo::parse("ttft_p99 < 200ms").unwrap().request_ok(&r),
            Some(false)
        );
        assert_eq!(Slo::parse("error_rate < 1%").unwrap().request_ok(&r), None);
    }
}

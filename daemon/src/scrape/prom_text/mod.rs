//! A parser for the Prometheus text exposition format 0.0.4.
//!
//! It never panics: any byte string decoded as UTF-8 yields an [`Exposition`]
//! holding the samples of every well-formed line plus one [`LineError`] per
//! bad line. Samples are grouped into [`Family`]s by their `# TYPE` name, so
//! `x_bucket`, `x_sum` and `x_count` of a histogram `x` land in family `x`.

use std::collections::HashMap;
use std::fmt;

mod line;

pub(crate) use line::parse_float;
use line::{clip, is_metric_name, parse_sample, split_word, unescape_help};

/// The type a `# TYPE` line declares; families without one are [`MetricKind::Untyped`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Monotonic counter (name may or may not end in `_total`).
    Counter,
    /// Gauge.
    Gauge,
    /// Histogram: `_bucket{le=..}`, `_sum`, `_count`.
    Histogram,
    /// Summary: `{quantile=..}`, `_sum`, `_count`.
    Summary,
    /// Untyped (or `OpenMetrics` `unknown`).
    Untyped,
}

impl MetricKind {
    fn parse(word: &str) -> Option<Self> {
        Some(match word {
            "counter" => Self::Counter,
            "gauge" => Self::Gauge,
            "histogram" => Self::Histogram,
            "summary" => Self::Summary,
            "untyped" | "unknown" => Self::Untyped,
            _ => return None,
        })
    }
}

/// One sample line: a series (name and labels), a value and an optional timestamp.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The sample's own name, e.g. `vllm:e2e_request_latency_seconds_bucket`.
    pub name: String,
    /// Labels in the order they appear, values unescaped.
    pub labels: Vec<(String, String)>,
    /// The value; `NaN`, `+Inf` and `-Inf` are allowed.
    pub value: f64,
    /// Milliseconds since the Unix epoch, when the line carries one.
    pub timestamp_ms: Option<i64>,
}

impl Sample {
    /// The value of label `name`, if present.
    #[must_use]
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// All samples that belong to one metric family.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    /// Family name (the `# TYPE` name, or the sample name when untyped).
    pub name: String,
    /// Unescaped `# HELP` text.
    pub help: Option<String>,
    /// Declared type.
    pub kind: MetricKind,
    /// Samples in input order.
    pub samples: Vec<Sample>,
}

/// What is wrong with one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineErrorKind {
    /// The metric name is missing or has a character outside `[a-zA-Z0-9_:]`.
    #[error("invalid metric name {0:?}")]
    InvalidMetricName(String),
    /// A label name is missing or malformed.
    #[error("invalid label name {0:?}")]
    InvalidLabelName(String),
    /// A label pair lacks `=` or its value is not in double quotes.
    #[error("expected {expected} in label set, found {found:?}")]
    BadLabelSyntax {
        /// What the parser wanted.
        expected: &'static str,
        /// What it saw instead.
        found: String,
    },
    /// A label value has an escape other than `\\`, `\"` or `\n`.
    #[error("invalid escape sequence \\{0} in label value")]
    InvalidEscape(char),
    /// The line ends inside a label set or label value.
    #[error("unterminated label set")]
    UnterminatedLabels,
    /// The same label name appears twice.
    #[error("duplicate label {0:?}")]
    DuplicateLabel(String),
    /// Nothing follows the series.
    #[error("missing value")]
    MissingValue,
    /// The value is not a float, `NaN`, `+Inf` or `-Inf`.
    #[error("invalid value {0:?}")]
    InvalidValue(String),
    /// The timestamp is not an integer number of milliseconds.
    #[error("invalid timestamp {0:?}")]
    InvalidTimestamp(String),
    /// Text after the timestamp.
    #[error("unexpected text after timestamp: {0:?}")]
    TrailingText(String),
    /// A `# TYPE` or `# HELP` line without a metric name or type.
    #[error("malformed {0} line")]
    MalformedComment(&'static str),
    /// A `# TYPE` with an unknown type word.
    #[error("unknown metric type {0:?}")]
    UnknownType(String),
    /// A second `# TYPE` line, or one after the family's samples.
    #[error("TYPE for {0:?} repeated or after its samples")]
    LateType(String),
    /// A histogram bucket without a parseable `le` label.
    #[error("histogram bucket without a valid le label")]
    BadBucketBound,
    /// A summary quantile sample without a parseable `quantile` label.
    #[error("summary sample without a valid quantile label")]
    BadQuantile,
}

/// A line that could not be used, with its 1-based line number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {kind}")]
pub struct LineError {
    /// 1-based line number in the exposition.
    pub line: usize,
    /// What is wrong.
    pub kind: LineErrorKind,
}

/// A parsed exposition: the families of all good lines and the errors of the bad ones.
#[derive(Debug, Clone, Default)]
pub struct Exposition {
    families: Vec<Family>,
    index: HashMap<String, usize>,
    errors: Vec<LineError>,
}

impl Exposition {
    /// Families in order of first appearance.
    #[must_use]
    pub fn families(&self) -> &[Family] {
        &self.families
    }

    /// The family called `name`.
    #[must_use]
    pub fn family(&self, name: &str) -> Option<&Family> {
        self.index.get(name).map(|&i| &self.families[i])
    }

    /// One error per line that was skipped.
    #[must_use]
    pub fn errors(&self) -> &[LineError] {
        &self.errors
    }

    /// Total number of samples over all families.
    #[must_use]
    pub fn sample_count(&self) -> usize {
        self.families.iter().map(|f| f.samples.len()).sum()
    }

    fn family_mut(&mut self, name: &str, kind: MetricKind) -> &mut Family {
        let i = if let Some(&i) = self.index.get(name) {
            i
        } else {
            self.families.push(Family {
                name: name.to_owned(),
                help: None,
                kind,
                samples: Vec::new(),
            });
            self.index.insert(name.to_owned(), self.families.len() - 1);
            self.families.len() - 1
        };
        &mut self.families[i]
    }

    /// The family a sample called `name` belongs to: a declared family of that
    /// name, or a histogram/summary whose suffixed series it is.
    fn owner_of(&self, name: &str) -> Option<usize> {
        if let Some(&i) = self.index.get(name) {
            return Some(i);
        }
        for (suffix, kinds) in [
            ("_bucket", &[MetricKind::Histogram][..]),
            ("_sum", &[MetricKind::Histogram, MetricKind::Summary][..]),
            ("_count", &[MetricKind::Histogram, MetricKind::Summary][..]),
            // OpenMetrics-style `# TYPE x counter` with samples named `x_total`.
            ("_total", &[MetricKind::Counter][..]),
        ] {
            if let Some(base) = name.strip_suffix(suffix)
                && let Some(&i) = self.index.get(base)
                && kinds.contains(&self.families[i].kind)
            {
                return Some(i);
            }
        }
        None
    }
}

/// Parses a whole exposition. Bad lines become [`LineError`]s; the rest is kept.
#[must_use]
pub fn parse(text: &str) -> Exposition {
    let mut out = Exposition::default();
    for (i, raw) in text.split('\n').enumerate() {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        if let Err(kind) = parse_line(&mut out, line) {
            out.errors.push(LineError { line: i + 1, kind });
        }
    }
    out
}

fn parse_line(out: &mut Exposition, line: &str) -> Result<(), LineErrorKind> {
    let trimmed = line.trim_start_matches([' ', '\t']);
    if trimmed.trim_end().is_empty() {
        return Ok(());
    }
    if let Some(comment) = trimmed.strip_prefix('#') {
        return parse_comment(out, comment);
    }
    let sample = parse_sample(trimmed)?;
    let idx = out.owner_of(&sample.name);
    if let Some(i) = idx {
        let fam = &out.families[i];
        match fam.kind {
            MetricKind::Histogram
                if sample.name.ends_with("_bucket")
                    && sample
                        .label("le")
                        .and_then(parse_float)
                        .is_none_or(f64::is_nan) =>
            {
                return Err(LineErrorKind::BadBucketBound);
            }
            MetricKind::Summary
                if sample.name == fam.name
                    && sample.label("quantile").and_then(parse_float).is_none() =>
            {
                return Err(LineErrorKind::BadQuantile);
            }
            _ => {}
        }
        out.families[i].samples.push(sample);
    } else {
        let name = sample.name.clone();
        out.family_mut(&name, MetricKind::Untyped)
            .samples
            .push(sample);
    }
    Ok(())
}

fn parse_comment(out: &mut Exposition, comment: &str) -> Result<(), LineErrorKind> {
    let comment = comment.trim_start_matches([' ', '\t']);
    let (keyword, rest) = split_word(comment);
    match keyword {
        "HELP" => {
            let (name, text) = split_word(rest);
            if !is_metric_name(name) {
                return Err(LineErrorKind::MalformedComment("HELP"));
            }
            let help = unescape_help(text);
            // HELP may come before TYPE; the family is created as untyped and
            // TYPE then sets its kind.
            out.family_mut(name, MetricKind::Untyped).help = Some(help);
            Ok(())
        }
        "TYPE" => {
            let (name, rest) = split_word(rest);
            let (word, trailing) = split_word(rest);
            if !is_metric_name(name) || word.is_empty() || !trailing.trim().is_empty() {
                return Err(LineErrorKind::MalformedComment("TYPE"));
            }
            let kind =
                MetricKind::parse(word).ok_or_else(|| LineErrorKind::UnknownType(clip(word)))?;
            if let Some(&i) = out.index.get(name) {
                let fam = &out.families[i];
                // A family created by a HELP line is still untyped and empty.
                if !fam.samples.is_empty() || fam.kind != MetricKind::Untyped {
                    return Err(LineErrorKind::LateType(clip(name)));
                }
            }
            out.family_mut(name, kind).kind = kind;
            Ok(())
        }
        // Any other comment (including OpenMetrics `# EOF`) is ignored.
        _ => Ok(()),
    }
}

impl fmt::Display for MetricKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Counter => "counter",
            Self::Gauge => "gauge",
            Self::Histogram => "histogram",
            Self::Summary => "summary",
            Self::Untyped => "untyped",
        })
    }
}

#[cfg(test)]
mod tests;

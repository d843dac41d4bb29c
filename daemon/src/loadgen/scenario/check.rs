//! Task checks (`request.check`): whether an answer did the job, for semantic throughput.
//!
//! A **task** is one request, or one whole conversation (`request.conversation`). It succeeds
//! when every request of it succeeded and every answer passed the check: all `contains`
//! strings present, no `not_contains` string present, the `regex` matching somewhere, the text
//! parsed as JSON valid against `json_schema`, and the request's E2E within `max_latency`.
//! Semantic throughput (sTPS) is succeeded tasks per second of the phase; a conversation cut
//! by the phase's end is not a task (neither succeeded nor failed).

use std::{sync::Arc, time::Duration};

use serde::Deserialize;
use serde_json::Value;

use crate::loadgen::scenario::{Phase, limits::de_duration};

/// `request.check` as written.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CheckSpec {
    /// Strings the answer must contain (all of them).
    #[serde(default)]
    pub contains: Vec<String>,
    /// Strings the answer must not contain (any of them fails it).
    #[serde(default)]
    pub not_contains: Vec<String>,
    /// A regular expression (Rust `regex` syntax) that must match somewhere in the answer.
    pub regex: Option<String>,
    /// A JSON Schema the answer, parsed as JSON, must satisfy.
    pub json_schema: Option<Value>,
    /// The request's E2E latency must be at most this.
    #[serde(default, deserialize_with = "de_opt_latency")]
    pub max_latency: Option<Duration>,
}

fn de_opt_latency<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    de_duration(d).map(Some)
}

/// A compiled check.
#[derive(Debug)]
pub struct Check {
    contains: Vec<String>,
    not_contains: Vec<String>,
    regex: Option<regex::Regex>,
    schema: Option<jsonschema::Validator>,
    max_latency_us: Option<u64>,
}

impl Check {
    /// Compiles `spec`; the error says which part is wrong.
    pub fn compile(spec: &CheckSpec) -> Result<Self, String> {
        let regex = spec
            .regex
            .as_deref()
            .map(|r| {
                regex::RegexBuilder::new(r)
                    // A bounded automaton: a hostile pattern cannot take the generator's memory.
                    .size_limit(1 << 20)
                    .build()
                    .map_err(|e| format!("check.regex: {e}"))
            })
            .transpose()?;
        let schema = spec
            .json_schema
            .as_ref()
            .map(|s| jsonschema::validator_for(s).map_err(|e| format!("check.json_schema: {e}")))
            .transpose()?;
        Ok(Self {
            contains: spec.contains.clone(),
            not_contains: spec.not_contains.clone(),
            regex,
            schema,
            max_latency_us: spec.max_latency.map(|d| d.as_micros() as u64),
        })
    }

    /// Phase `p`'s `request.check`, compiled, if it has one: where a plan compiles its phases'
    /// checks, read or derived (`Plan::with_phases`). The error names the phase.
    pub fn of_phase(p: &Phase) -> Result<Option<Arc<Self>>, String> {
        p.request
            .check
            .as_ref()
            .map(|spec| {
                Self::compile(spec)
                    .map(Arc::new)
                    .map_err(|why| format!("phase `{}`: {why}", p.name))
            })
            .transpose()
    }

    /// Whether `answer`, which took `e2e_us`, passes.
    #[must_use]
    pub fn passes(&self, answer: &str, e2e_us: u64) -> bool {
        self.max_latency_us.is_none_or(|m| e2e_us <= m)
            && self.contains.iter().all(|c| answer.contains(c.as_str()))
            && !self
                .not_contains
                .iter()
                .any(|c| answer.contains(c.as_str()))
            && self.regex.as_ref().is_none_or(|r| r.is_match(answer))
            && self.schema.as_ref().is_none_or(|s| {
                serde_json::from_str::<Value>(answer.trim()).is_ok_and(|v| s.is_valid(&v))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(yaml: &str) -> Check {
        let spec: CheckSpec = serde_norway::from_str(yaml).unwrap();
        Check::compile(&spec).unwrap()
    }

    #[test]
    fn each_part_decides() {
        let c = check("{contains: [Paris], not_contains: [sorry], max_latency: 1s}");
        assert!(c.passes("The capital is Paris.", 500_000));
        assert!(!c.passes("The capital is Lyon.", 500_000));
        assert!(!c.passes("sorry, Paris", 500_000));
        assert!(!c.passes("Paris", 1_000_001));
        let r = check("{regex: '^\\d{3}-\\d{4}$'}");
        assert!(r.passes("555-1234", 0) && !r.passes("call 555-1234", 0));
        let j = check(
            "{json_schema: {type: object, required: [answer], properties: {answer: {type: integer}}}}",
        );
        assert!(j.passes(" {\"answer\": 42} ", 0));
        assert!(!j.passes("{\"answer\": \"42\"}", 0));
        assert!(!j.passes("42 is the answer", 0));
        assert!(check("{}").passes("", 0));
    }

    #[test]
    fn bad_parts_are_named() {
        let spec: CheckSpec = serde_norway::from_str("{regex: '('}").unwrap();
        assert!(
            Check::compile(&spec)
                .unwrap_err()
                .starts_with("check.regex")
        );
        let spec: CheckSpec = serde_norway::from_str("{json_schema: {type: 12}}").unwrap();
        assert!(
            Check::compile(&spec)
                .unwrap_err()
                .starts_with("check.json_schema")
        );
    }
}

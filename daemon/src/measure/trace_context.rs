//! The W3C trace context a request was sent with: its trace id (one per run, or per
//! conversation) and its own span id, as they went out in `traceparent`
//! (`00-<trace id>-<span id>-01`) and `x-request-id` (`<trace id>-<span id>`). The OTLP request
//! span of the request takes the same ids, so a server that traces its requests (vLLM, `SGLang`
//! with tracing on) puts its spans under it.
//!
//! In the report a request's `trace` reads
//! `{"trace_id": "4bf9…", "span_id": "00f0…", "request_id": "4bf9…-00f0…"}`.

use std::num::NonZeroU64;

use serde::{Deserialize, Serialize};

/// A W3C trace id: 16 bytes, never all zero; 32 lower-case hex digits in JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct TraceId(u128);

impl schemars::JsonSchema for TraceId {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "TraceId".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A W3C trace id: 32 lower-case hex digits, not all zero.",
            "type": "string",
            "pattern": "^[0-9a-f]{32}$"
        })
    }
}

impl TraceId {
    /// A new random trace id.
    #[must_use]
    pub fn random() -> Self {
        loop {
            let id = rand::random::<u128>();
            if id != 0 {
                return Self(id);
            }
        }
    }

    /// The id as a number (big-endian: its hex is the `traceparent` field).
    #[must_use]
    pub fn get(self) -> u128 {
        self.0
    }
}

impl std::fmt::Display for TraceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl std::str::FromStr for TraceId {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        hex(s, 32)
            .map(Self)
            .ok_or_else(|| format!("trace id {s:?} is not 32 lower-case hex digits (not all zero)"))
    }
}

impl From<TraceId> for String {
    fn from(t: TraceId) -> Self {
        t.to_string()
    }
}

impl TryFrom<String> for TraceId {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

/// `s` as a number when it is exactly `digits` lower-case hex digits, not all zero.
fn hex(s: &str, digits: usize) -> Option<u128> {
    if s.len() != digits || !s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    u128::from_str_radix(s, 16).ok().filter(|&n| n != 0)
}

/// The trace context of one request: the trace it belongs to and its own span.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(into = "Wire", try_from = "Wire")]
// 24 bytes (the trace id as two halves, the span id non-zero): `Option<TraceContext>` costs a
// record no more.
pub struct TraceContext {
    trace: [u64; 2],
    span: NonZeroU64,
}

impl TraceContext {
    /// A request of `trace` with a new random span id.
    #[must_use]
    pub fn new_span(trace: TraceId) -> Self {
        let span = loop {
            if let Some(s) = NonZeroU64::new(rand::random()) {
                break s;
            }
        };
        Self::from_ids(trace, span)
    }

    /// The context with these ids.
    #[must_use]
    pub fn from_ids(trace: TraceId, span: NonZeroU64) -> Self {
        Self {
            trace: [(trace.0 >> 64) as u64, trace.0 as u64],
            span,
        }
    }

    /// The trace id.
    #[must_use]
    pub fn trace_id(&self) -> TraceId {
        TraceId((u128::from(self.trace[0]) << 64) | u128::from(self.trace[1]))
    }

    /// The span id.
    #[must_use]
    pub fn span_id(&self) -> NonZeroU64 {
        self.span
    }

    /// The `traceparent` header: version 00, the ids, the sampled flag set.
    #[must_use]
    pub fn traceparent(&self) -> String {
        format!("00-{}-{:016x}-01", self.trace_id(), self.span)
    }

    /// The `x-request-id` header: the trace id and the span id, unique per request.
    #[must_use]
    pub fn request_id(&self) -> String {
        format!("{}-{:016x}", self.trace_id(), self.span)
    }
}

/// How a trace context reads in JSON.
// The JSON's names, which say what each id is.
#[allow(clippy::struct_field_names)]
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(rename = "TraceContext")]
#[serde(deny_unknown_fields)]
struct Wire {
    /// The trace id, 32 lower-case hex digits.
    trace_id: TraceId,
    /// The request's span id, 16 lower-case hex digits (the `traceparent`'s parent id).
    #[schemars(pattern(r"^[0-9a-f]{16}$"))]
    span_id: String,
    /// The `x-request-id` the request was sent with.
    #[serde(default)]
    request_id: String,
}

impl From<TraceContext> for Wire {
    fn from(t: TraceContext) -> Self {
        Self {
            trace_id: t.trace_id(),
            span_id: format!("{:016x}", t.span),
            request_id: t.request_id(),
        }
    }
}

impl TryFrom<Wire> for TraceContext {
    type Error = String;

    fn try_from(w: Wire) -> Result<Self, String> {
        let trace = w.trace_id;
        let span = hex(&w.span_id, 16)
            .and_then(|n| NonZeroU64::new(n as u64))
            .ok_or_else(|| {
                format!(
                    "span id {:?} is not 16 lower-case hex digits (not all zero)",
                    w.span_id
                )
            })?;
        Ok(Self::from_ids(trace, span))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_and_json_carry_the_same_ids() {
        let t = TraceContext::from_ids(
            TraceId(0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736),
            NonZeroU64::new(0x00f0_67aa_0ba9_02b7).unwrap(),
        );
        assert_eq!(
            t.traceparent(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
        assert_eq!(
            t.request_id(),
            "4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7"
        );
        let json = serde_json::to_value(t).unwrap();
        assert_eq!(json["span_id"], "00f067aa0ba902b7");
        assert_eq!(json["request_id"], t.request_id());
        let back: TraceContext = serde_json::from_value(json).unwrap();
        assert_eq!(back, t);
        assert_eq!(std::mem::size_of::<Option<TraceContext>>(), 24);
    }

    #[test]
    fn random_ids_differ_and_bad_ones_are_refused() {
        let run = TraceId::random();
        let (a, b) = (TraceContext::new_span(run), TraceContext::new_span(run));
        assert_eq!(a.trace_id(), b.trace_id());
        assert_ne!(a.span_id(), b.span_id());
        for (trace, span) in [
            ("00000000000000000000000000000000", "00f067aa0ba902b7"),
            ("4BF92F3577B34DA6A3CE929D0E0E4736", "00f067aa0ba902b7"),
            ("4bf92f3577b34da6a3ce929d0e0e4736", "0000000000000000"),
            ("4bf92f3577b34da6", "00f067aa0ba902b7"),
        ] {
            let e = serde_json::from_value::<TraceContext>(
                serde_json::json!({"trace_id": trace, "span_id": span}),
            )
            .unwrap_err()
            .to_string();
            assert!(e.contains("hex digits"), "{e}");
        }
    }
}

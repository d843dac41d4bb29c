//! What the steps of one task hand on to each other (a failed step's fallback standing in for
//! its result), and what one exchange of a step needs: the client, headers, clock and trace.

use std::time::Instant;

use bytes::Bytes;
use hyper::{
    Method, Uri,
    header::{HeaderName, HeaderValue},
};
use serde_json::Value;

use super::step::Step;
use crate::loadgen::{
    client::{HttpClient, openai, us_since},
    scenario::pipeline::Fallback,
};
use crate::measure::{
    record::{ErrorClass, RequestRecord, StepKind},
    trace_context::{TraceContext, TraceId},
};

/// What the steps hand on to each other within one task.
#[derive(Default)]
pub(super) struct State {
    pub(super) query: String,
    pub(super) vector: Option<Vec<f32>>,
    pub(super) docs: Vec<String>,
    /// The chat's conversation so far (the tools step sends it on).
    pub(super) messages: Vec<Value>,
    /// The last chat answer's text.
    pub(super) answer: Option<String>,
    /// The last chat answer's tool calls.
    pub(super) tool_calls: Vec<openai::ToolCall>,
    /// Tool-call rounds done.
    pub(super) depth: u32,
    /// TTFT of the last chat request, from its send (µs).
    pub(super) ttft_us: Option<u64>,
}

/// A step's failure: its class and detail.
pub(super) type Failure = (ErrorClass, String);

/// What one exchange of a step needs.
pub(super) struct Io<'a> {
    pub(super) client: &'a HttpClient,
    pub(super) headers: &'a [(HeaderName, HeaderValue)],
    pub(super) t0: Instant,
    /// The task's trace: each exchange is a span of it (`None`: no trace headers).
    pub(super) trace: Option<TraceId>,
}

impl Io<'_> {
    /// A fresh record for one exchange, due now, with a span of the task's trace.
    pub(super) fn record(&self) -> RequestRecord {
        let mut r = RequestRecord::new(0, 0, crate::measure::Endpoint::Chat, us_since(self.t0));
        r.trace = self.trace.map(TraceContext::new_span);
        r
    }

    pub(super) fn request(
        &self,
        step: &Step,
        uri: Uri,
        body: Bytes,
    ) -> hyper::Request<http_body_util::Full<Bytes>> {
        step.target
            .request_to(&Method::POST, uri, body, self.headers)
    }
}

pub(super) fn failed(x: &RequestRecord) -> Failure {
    (
        x.error.unwrap_or(ErrorClass::MalformedStream),
        x.error_message.clone().unwrap_or_default(),
    )
}

impl State {
    /// Puts a fallback in place of a failed step's result.
    pub(super) fn stand_in(&mut self, kind: StepKind, fb: &Fallback) {
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .into_iter()
                .flatten()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect()
        };
        match (kind, fb) {
            (StepKind::Embed, Fallback::Skip) => self.vector = None,
            (StepKind::Embed, Fallback::Default(v)) => {
                self.vector = v.as_array().map(|a| {
                    a.iter()
                        .filter_map(Value::as_f64)
                        .map(|f| f as f32)
                        .collect()
                });
            }
            (StepKind::Search, Fallback::Skip) => self.docs.clear(),
            // The documents as they came (skip), or the default ones.
            (StepKind::Search | StepKind::Rerank, Fallback::Default(v)) => self.docs = strings(v),
            (StepKind::Rerank, Fallback::Skip) => {}
            (StepKind::Chat, Fallback::Skip) => {
                self.answer = None;
                self.tool_calls.clear();
            }
            (StepKind::Chat | StepKind::Tools, Fallback::Default(v)) => {
                self.answer = v.as_str().map(str::to_owned);
                self.tool_calls.clear();
            }
            // The answer so far.
            (StepKind::Tools, Fallback::Skip) => self.tool_calls.clear(),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn fallbacks_stand_in() {
        let mut st = State {
            docs: vec!["x".into()],
            ..State::default()
        };
        st.stand_in(StepKind::Rerank, &Fallback::Skip);
        assert_eq!(st.docs, ["x"]);
        st.stand_in(StepKind::Search, &Fallback::Default(json!(["d1", "d2"])));
        assert_eq!(st.docs, ["d1", "d2"]);
        st.stand_in(StepKind::Embed, &Fallback::Default(json!([0.5, 1])));
        assert_eq!(st.vector, Some(vec![0.5, 1.0]));
        st.stand_in(StepKind::Chat, &Fallback::Default(json!("sorry")));
        assert_eq!(st.answer.as_deref(), Some("sorry"));
    }
}

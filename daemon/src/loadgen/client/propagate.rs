//! The trace context of a request on the wire: a W3C `traceparent` and an `x-request-id` from
//! its record's [`TraceContext`](crate::measure::trace_context::TraceContext), so that a server
//! that traces its requests (vLLM, `SGLang` with tracing on) joins the client's trace, and one
//! that logs request ids (vLLM takes `x-request-id` as its own) names the same request.

use hyper::header::{HeaderMap, HeaderName, HeaderValue};

use crate::measure::record::RequestRecord;

/// `traceparent` (W3C Trace Context).
pub const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
/// `x-request-id`.
pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Sets the two headers from `rec`'s trace context (replacing any the scenario gave); a record
/// without one (`trace_headers: false`) leaves the headers as they are.
pub fn stamp(headers: &mut HeaderMap, rec: &RequestRecord) {
    let Some(t) = rec.trace else {
        return;
    };
    // Hex digits and dashes only: always a valid header value.
    for (name, value) in [
        (TRACEPARENT, t.traceparent()),
        (X_REQUEST_ID, t.request_id()),
    ] {
        if let Ok(v) = HeaderValue::try_from(value) {
            headers.insert(name, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::trace_context::{TraceContext, TraceId};

    #[test]
    fn a_record_with_a_context_stamps_both_headers_and_one_without_none() {
        let mut rec = RequestRecord::new(0, 0, crate::measure::Endpoint::Chat, 0);
        let mut h = HeaderMap::new();
        stamp(&mut h, &rec);
        assert!(h.is_empty());
        let t = TraceContext::new_span(TraceId::random());
        rec.trace = Some(t);
        h.insert(X_REQUEST_ID, HeaderValue::from_static("the scenario's"));
        stamp(&mut h, &rec);
        assert_eq!(h[TRACEPARENT], t.traceparent().as_str());
        assert_eq!(h[X_REQUEST_ID], t.request_id().as_str());
        assert_eq!(h.len(), 2);
    }
}

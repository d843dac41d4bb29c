//! Span ids chosen by the caller: a request span takes the trace id and span id its request's
//! `traceparent` carried, so that the server's spans (children of that id) join it. The SDK
//! draws every id from its id generator; this one hands out ids set just before a span is
//! built ([`with_ids`]), on the same thread, and random ones otherwise.

use std::cell::Cell;

use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};

thread_local! {
    static TRACE: Cell<Option<TraceId>> = const { Cell::new(None) };
    static SPAN: Cell<Option<SpanId>> = const { Cell::new(None) };
}

/// The exporter's id generator: the ids [`with_ids`] set, else random ones.
#[derive(Debug, Default)]
pub(crate) struct PresetIds {
    random: RandomIdGenerator,
}

impl IdGenerator for PresetIds {
    fn new_trace_id(&self) -> TraceId {
        TRACE.take().unwrap_or_else(|| self.random.new_trace_id())
    }

    fn new_span_id(&self) -> SpanId {
        SPAN.take().unwrap_or_else(|| self.random.new_span_id())
    }
}

/// Runs `build` (which starts one root span) with the next trace and span ids set to `ids`
/// (`(trace id, span id)`); `None` leaves them random. What `build` did not take is cleared.
pub(crate) fn with_ids<R>(ids: Option<(u128, u64)>, build: impl FnOnce() -> R) -> R {
    if let Some((trace, span)) = ids {
        TRACE.set(Some(TraceId::from(trace)));
        SPAN.set(Some(SpanId::from(span)));
    }
    let out = build();
    TRACE.set(None);
    SPAN.set(None);
    out
}

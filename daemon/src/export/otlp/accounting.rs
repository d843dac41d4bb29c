//! Counting what the export path delivered and what it lost, so an unreachable collector shows
//! up as a number instead of silence.
//!
//! The SDK's batch processor keeps its own drop count private and only logs it at shutdown, so
//! the counts are taken around it: a processor wrapper counts every ended span (submitted), an
//! exporter wrapper counts spans handed to the exporter and whether the export succeeded. The
//! SDK guarantees each submitted span either reaches the exporter or is dropped at the queue,
//! so after shutdown `queue_dropped = submitted - exported - failed` exactly.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};

use crate::export::prometheus::DropCounter;

/// Counters shared by the wrappers and the [`ExportStats`] reader.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    spans_submitted: AtomicU64,
    spans_exported: AtomicU64,
    spans_failed: AtomicU64,
    metric_exports_ok: AtomicU64,
    metric_exports_failed: AtomicU64,
}

/// What the OTLP export delivered and lost so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ExportStats {
    /// Spans ended and handed to the export queue.
    pub spans_submitted: u64,
    /// Spans the collector accepted.
    pub spans_exported: u64,
    /// Spans in export requests that failed (collector down, refused, timed out).
    pub spans_failed: u64,
    /// Spans shed because the queue was full, plus any still queued (exact after shutdown).
    pub spans_queue_dropped: u64,
    /// Metric export requests accepted.
    pub metric_exports_ok: u64,
    /// Metric export requests that failed; their data points are lost for that interval (the
    /// next export carries cumulative values again).
    pub metric_exports_failed: u64,
}

impl ExportStats {
    /// All spans lost, wherever.
    #[must_use]
    pub fn spans_dropped(&self) -> u64 {
        self.spans_failed + self.spans_queue_dropped
    }

    /// The losses as `/metrics` drop counters: `inferscope_dropped_total{stage="otlp",...}`.
    #[must_use]
    pub fn drop_counters(&self) -> Vec<DropCounter> {
        let counter = |what: &str, count| DropCounter::new("otlp", what, count);
        vec![
            counter("spans", self.spans_dropped()),
            counter("metric_exports", self.metric_exports_failed),
        ]
    }
}

impl Counters {
    pub(crate) fn stats(&self) -> ExportStats {
        let submitted = self.spans_submitted.load(Ordering::Acquire);
        let exported = self.spans_exported.load(Ordering::Acquire);
        let failed = self.spans_failed.load(Ordering::Acquire);
        ExportStats {
            spans_submitted: submitted,
            spans_exported: exported,
            spans_failed: failed,
            spans_queue_dropped: submitted.saturating_sub(exported + failed),
            metric_exports_ok: self.metric_exports_ok.load(Ordering::Acquire),
            metric_exports_failed: self.metric_exports_failed.load(Ordering::Acquire),
        }
    }
}

/// Counts spans entering the wrapped processor.
#[derive(Debug)]
pub(crate) struct CountingProcessor<P> {
    pub(crate) inner: P,
    pub(crate) counters: Arc<Counters>,
}

impl<P: SpanProcessor> SpanProcessor for CountingProcessor<P> {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        // Only sampled spans reach on_end; those are the ones the queue may shed.
        self.counters.spans_submitted.fetch_add(1, Ordering::AcqRel);
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// Counts spans the wrapped exporter delivered or failed to deliver.
#[derive(Debug)]
pub(crate) struct CountingSpanExporter<E> {
    pub(crate) inner: E,
    pub(crate) counters: Arc<Counters>,
}

impl<E: SpanExporter> SpanExporter for CountingSpanExporter<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len() as u64;
        let result = self.inner.export(batch).await;
        let counter = if result.is_ok() {
            &self.counters.spans_exported
        } else {
            &self.counters.spans_failed
        };
        counter.fetch_add(n, Ordering::AcqRel);
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// Counts metric export requests that succeeded or failed.
#[derive(Debug)]
pub(crate) struct CountingMetricExporter<E> {
    pub(crate) inner: E,
    pub(crate) counters: Arc<Counters>,
}

impl<E: PushMetricExporter> PushMetricExporter for CountingMetricExporter<E> {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let result = self.inner.export(metrics).await;
        let counter = if result.is_ok() {
            &self.counters.metric_exports_ok
        } else {
            &self.counters.metric_exports_failed
        };
        counter.fetch_add(1, Ordering::AcqRel);
        result
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_drops_are_what_neither_arrived_nor_failed() {
        let c = Counters::default();
        c.spans_submitted.store(100, Ordering::Release);
        c.spans_exported.store(60, Ordering::Release);
        c.spans_failed.store(15, Ordering::Release);
        let s = c.stats();
        assert_eq!(s.spans_queue_dropped, 25);
        assert_eq!(s.spans_dropped(), 40);
        assert_eq!(s.drop_counters()[0].count, 40);
        assert_eq!(s.drop_counters()[1].what, "metric_exports");
    }
}

//! An explained phase as a trace: an `inferscope.phase` span over the phase carrying its
//! verdict, and per decomposition of its latency rise an `inferscope.latency_rise` child as long
//! as the rise, whose children are the parts laid end to end (`inferscope.rise.queue`, ...):
//! the parts add up to the rise, so they tile it. A phase of a pipeline (`--service`) has an
//! `inferscope.hops` child too, one child per hop (`inferscope.hop.search`, ...,
//! `inferscope.hop.orchestration`, `inferscope.hop.rest`) laid end to end the same way.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{SpanKind, TraceContextExt, Tracer};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::SdkTracer;

use crate::attribute::{Decomposition, PhaseSummary, hops::Hops};

/// Name of the span of an explained phase.
pub const PHASE_SPAN: &str = "inferscope.phase";

/// Name of the span of one decomposition of a phase's latency rise.
pub const RISE_SPAN: &str = "inferscope.latency_rise";

/// Name of the span of a phase's rise split by hop.
pub const HOPS_SPAN: &str = "inferscope.hops";

/// One span to emit: its name, interval, attributes and children.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    /// Span name.
    pub name: String,
    /// Start.
    pub start: SystemTime,
    /// End.
    pub end: SystemTime,
    /// Attributes.
    pub attributes: Vec<(&'static str, String)>,
    /// Child spans.
    pub children: Vec<Planned>,
}

/// The spans of `phase`: the phase, its rises, their parts.
#[must_use]
pub fn plan(phase: &PhaseSummary) -> Planned {
    let at = |ms: u64| UNIX_EPOCH + Duration::from_millis(ms);
    let start = at(phase.start_unix_ms);
    let mut attributes = vec![
        ("inferscope.phase", phase.name.clone()),
        ("inferscope.verdict", phase.dominant.to_string()),
        (
            "inferscope.verdict.score",
            format!("{:.2}", phase.confidence),
        ),
    ];
    if phase.causes.len() > 1 {
        let named: Vec<String> = phase
            .causes
            .iter()
            .map(|c| format!("{} {:.0}%", c.cause, c.part * 100.0))
            .collect();
        attributes.push(("inferscope.verdict.causes", named.join(" + ")));
    }
    let mut children: Vec<Planned> = [&phase.decomposition, &phase.tail_decomposition]
        .into_iter()
        .flatten()
        .filter(|d| d.increase_ms > 0.0)
        .map(|d| rise(d, start))
        .collect();
    children.extend(phase.hops.as_ref().map(|h| hops(h, start)));
    Planned {
        name: PHASE_SPAN.to_owned(),
        start,
        end: at(phase.end_unix_ms.max(phase.start_unix_ms)),
        attributes,
        children,
    }
}

/// Spans named `prefix` + each part's name, `ms` long each, end to end from `start`.
fn tiles<'a>(
    prefix: &str,
    parts: impl IntoIterator<Item = (&'a str, f64)>,
    start: SystemTime,
) -> Vec<Planned> {
    let mut at = start;
    let mut children = Vec::new();
    for (name, v) in parts {
        let end = at + span_ms(v);
        children.push(Planned {
            name: format!("{prefix}{}", name.replace(" -> ", "_to_").replace(' ', "_")),
            start: at,
            end,
            attributes: vec![("inferscope.rise.ms", format!("{v:.3}"))],
            children: Vec::new(),
        });
        at = end;
    }
    children
}

fn span_ms(v: f64) -> Duration {
    Duration::from_secs_f64(v.max(0.0) / 1000.0)
}

/// The span of a phase's rise split by hop, from `start`: one child per hop, then the rest.
fn hops(h: &Hops, start: SystemTime) -> Planned {
    let parts = h
        .parts
        .iter()
        .map(|p| (p.hop.as_str(), p.part_ms))
        .chain([("rest", h.rest_ms)]);
    let mut attributes = vec![("inferscope.rise.ms", format!("{:.3}", h.rise_ms))];
    attributes.extend(h.holder.clone().map(|n| ("inferscope.hop.holder", n)));
    Planned {
        name: HOPS_SPAN.to_owned(),
        start,
        end: start + span_ms(h.rise_ms),
        attributes,
        children: tiles("inferscope.hop.", parts, start),
    }
}

/// The span of decomposition `d` from `start`, its parts end to end.
fn rise(d: &Decomposition, start: SystemTime) -> Planned {
    let ms = span_ms;
    let children = tiles("inferscope.rise.", d.parts(), start);
    let quantile = d.band.as_ref().map_or("p50", |b| b.quantile.as_str());
    Planned {
        name: RISE_SPAN.to_owned(),
        start,
        end: start + ms(d.increase_ms),
        attributes: vec![
            ("inferscope.rise.metric", d.metric.label().to_owned()),
            ("inferscope.rise.quantile", quantile.to_owned()),
            ("inferscope.rise.ms", format!("{:.3}", d.increase_ms)),
            (
                "inferscope.rise.baseline_ms",
                format!("{:.3}", d.baseline_ms),
            ),
        ],
        children,
    }
}

/// Emits `planned` and its children through `tracer`, under `parent`.
pub(crate) fn emit(tracer: &SdkTracer, planned: &Planned, parent: &Context) {
    let attrs: Vec<KeyValue> = planned
        .attributes
        .iter()
        .map(|(k, v)| KeyValue::new(*k, v.clone()))
        .collect();
    let span = tracer
        .span_builder(planned.name.clone())
        .with_kind(SpanKind::Internal)
        .with_start_time(planned.start)
        .with_attributes(attrs)
        .start_with_context(tracer, parent);
    let cx = parent.with_span(span);
    for child in &planned.children {
        emit(tracer, child, &cx);
    }
    cx.span().end_with_timestamp(planned.end);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribute::{Cause, attribute};
    use crate::collect::timeline::Timeline;

    #[test]
    fn a_pipelines_phase_has_a_hops_span_whose_children_tile_the_rise() {
        use crate::attribute::hops::{HopPart, Hops};
        let part = |hop: &str, ms: f64| HopPart {
            hop: hop.into(),
            baseline_ms: Some(1.0),
            value_ms: Some(1.0 + ms),
            part_ms: ms,
            cause: Cause::None,
            confidence: 0.5,
        };
        let path = format!(
            "{}/tests/fixtures/timelines/queue.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let t: Timeline = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let mut phase = attribute(&t).phase("peak").unwrap().clone();
        phase.hops = Some(Hops {
            rise_ms: 500.0,
            parts: vec![part("search", 480.0), part("orchestration", 15.0)],
            rest_ms: 5.0,
            holder: Some("search".into()),
        });
        let p = plan(&phase);
        let h = p.children.iter().find(|c| c.name == HOPS_SPAN).unwrap();
        assert!(
            h.attributes
                .contains(&("inferscope.hop.holder", "search".to_owned()))
        );
        let names: Vec<&str> = h.children.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "inferscope.hop.search",
                "inferscope.hop.orchestration",
                "inferscope.hop.rest"
            ]
        );
        for w in h.children.windows(2) {
            assert_eq!(w[0].end, w[1].start);
        }
        assert_eq!(h.children.last().unwrap().end, h.end);
        assert_eq!(
            h.end.duration_since(h.start).unwrap(),
            Duration::from_millis(500)
        );
    }

    #[test]
    fn a_phase_becomes_a_span_whose_rise_children_tile_the_rise() {
        let path = format!(
            "{}/tests/fixtures/timelines/queue.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let t: Timeline = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let a = attribute(&t);
        let peak = a.phase("peak").unwrap();
        assert_eq!(peak.dominant, Cause::Queue);
        let p = plan(peak);
        assert_eq!(p.name, PHASE_SPAN);
        assert!(
            p.attributes
                .contains(&("inferscope.verdict", "queue".to_owned()))
        );
        let rise = &p.children[0];
        assert_eq!(rise.name, RISE_SPAN);
        let parts = &rise.children;
        assert!(parts.iter().any(|c| c.name == "inferscope.rise.queue"));
        assert_eq!(parts.first().unwrap().start, rise.start);
        for w in parts.windows(2) {
            assert_eq!(w[0].end, w[1].start);
        }
        let tiled = parts
            .last()
            .unwrap()
            .end
            .duration_since(rise.start)
            .unwrap();
        let whole = rise.end.duration_since(rise.start).unwrap();
        assert!(
            tiled.abs_diff(whole) < Duration::from_micros(10),
            "{tiled:?} vs {whole:?}"
        );
    }
}

//! Prometheus text exposition (format 0.0.4) of the time lines: each server's latest window's
//! gauges, the running totals of its counters and its verdict (every series labelled with the
//! server: `server`, `k8s_pod_name`, `k8s_namespace_name`, `k8s_container_name`), which probes
//! are attached, and what was dropped where. A family's samples for every server follow its one
//! `# TYPE` line.
//!
//! It is a pure function of plain data so the daemon's `/metrics` handler, a test and a report
//! can all call it; serving it is the caller's business.

use std::fmt::Write as _;

use crate::attribute::{
    Cause, Verdict,
    hops::{Hops, Orchestration},
};
use crate::collect::catalog::{Kind, Labels, SIGNALS, Totals};
use crate::collect::kernel::LossCount;
use crate::collect::timeline::Window;
use crate::probes::HookStatus;

/// The content type of the exposition format written here.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Items that some stage could not deliver, e.g. failed ring-buffer reservations in the kernel
/// or spans the OTLP export queue shed. Always a monotonic count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DropCounter {
    /// Where they were dropped, e.g. `kernel_ringbuf`, `queue`, `otlp_spans`.
    pub stage: String,
    /// What was dropped there, e.g. a map name (`RUNQ_EVENTS`) or `spans`.
    pub what: String,
    /// The kernel hook that dropped them (`hook` label), for the kernel's counters.
    pub hook: Option<String>,
    /// Why it dropped them (`reason` label), for the kernel's counters.
    pub reason: Option<String>,
    /// How many, since start.
    pub count: u64,
}

impl DropCounter {
    /// `count` items `stage` dropped of `what`, without a hook.
    pub fn new(stage: impl Into<String>, what: impl Into<String>, count: u64) -> Self {
        Self {
            stage: stage.into(),
            what: what.into(),
            hook: None,
            reason: None,
            count,
        }
    }
}

impl From<LossCount> for DropCounter {
    fn from(l: LossCount) -> Self {
        Self {
            hook: l.hook.map(str::to_owned),
            reason: l.reason.map(str::to_owned),
            ..Self::new(l.stage, l.what, l.count)
        }
    }
}

/// One server's (or one run's) time line in a scrape.
#[derive(Debug, Clone, Copy)]
pub struct Series<'a> {
    /// The newest closed window, if any.
    pub latest: Option<&'a Window>,
    /// Counter totals over all closed windows.
    pub totals: &'a Totals,
    /// Labels of its series (the server's identity, on a node).
    pub labels: &'a Labels,
    /// The newest closed window's verdict, if attribution ran.
    pub verdict: Option<&'a Verdict>,
    /// Its split among the servers it called, when it called any (a gateway on a node).
    pub hops: Option<&'a Hops>,
    /// What it asked each server it called for, per request (a gateway on a node).
    pub orchestration: Option<&'a Orchestration>,
}

/// Everything one scrape shows.
#[derive(Debug, Clone, Copy)]
pub struct Snapshot<'a> {
    /// Each server's time line.
    pub series: &'a [Series<'a>],
    /// Per-hook attach status.
    pub probes: &'a [HookStatus],
    /// Drop counters.
    pub drops: &'a [DropCounter],
}

/// A family's header once, when it has samples, then the samples.
struct Family<'o> {
    out: &'o mut String,
    name: String,
    kind: &'static str,
    help: &'static str,
    started: bool,
}

impl Family<'_> {
    fn sample(&mut self, labels: &[(&str, String)], extra: &[(&str, String)], value: f64) {
        if !self.started {
            header(self.out, &self.name, self.kind, self.help);
            self.started = true;
        }
        sample(self.out, &self.name, labels, extra, value);
    }
}

fn family<'o>(
    out: &'o mut String,
    name: impl Into<String>,
    kind: &'static str,
    help: &'static str,
) -> Family<'o> {
    Family {
        out,
        name: name.into(),
        kind,
        help,
        started: false,
    }
}

/// Renders `snap` in the Prometheus text format 0.0.4.
#[must_use]
pub fn render(snap: &Snapshot<'_>) -> String {
    let mut out = String::new();
    let bases: Vec<Vec<(&'static str, String)>> = snap
        .series
        .iter()
        .map(|s| s.labels.pairs(s.latest.and_then(|w| w.phase.as_deref())))
        .collect();

    for signal in SIGNALS {
        match signal.kind {
            Kind::Counter => {
                let mut f = family(
                    &mut out,
                    format!("{}_total", signal.prom),
                    "counter",
                    signal.description,
                );
                for (s, base) in snap.series.iter().zip(&bases) {
                    if let Some(total) = s.totals.get(signal.name) {
                        f.sample(base, &[], total);
                    }
                }
            }
            Kind::Gauge => {
                let mut f = family(&mut out, signal.prom, "gauge", signal.description);
                for (s, base) in snap.series.iter().zip(&bases) {
                    let Some(window) = s.latest else { continue };
                    for p in signal.points(window) {
                        let extra: Vec<(&str, String)> = p
                            .stat
                            .map(|q| ("stat", q.to_owned()))
                            .into_iter()
                            .chain(p.gpu.map(|g| ("gpu", g.to_string())))
                            .collect();
                        f.sample(base, &extra, p.value);
                    }
                }
            }
        }
    }

    let mut f = family(
        &mut out,
        "inferscope_window_start_timestamp_seconds",
        "gauge",
        "Start of the newest closed time-line window (Unix time).",
    );
    for (s, base) in snap.series.iter().zip(&bases) {
        if let Some(window) = s.latest {
            f.sample(base, &[], window.start_unix_ms as f64 / 1000.0);
        }
    }

    verdicts(&mut out, snap.series);

    if !snap.probes.is_empty() {
        let name = "inferscope_probe_attached";
        header(
            &mut out,
            name,
            "gauge",
            "Whether the kernel hook is attached (1) or not (0).",
        );
        for hook in snap.probes {
            let labels = [("probe", hook.probe.clone())];
            sample(
                &mut out,
                name,
                &labels,
                &[],
                if hook.is_attached() { 1.0 } else { 0.0 },
            );
        }
    }

    let name = "inferscope_dropped_total";
    if !snap.drops.is_empty() {
        header(
            &mut out,
            name,
            "counter",
            "Items a stage could not deliver, since start.",
        );
    }
    for d in snap.drops {
        let labels = [("stage", d.stage.clone()), ("what", d.what.clone())];
        let extra: Vec<(&str, String)> = [("hook", &d.hook), ("reason", &d.reason)]
            .into_iter()
            .filter_map(|(k, v)| Some((k, v.clone()?)))
            .collect();
        sample(&mut out, name, &labels, &extra, d.count as f64);
    }
    out
}

/// Each server's `inferscope_verdict{cause}` (1 for its verdict's cause, 0 for the others) and
/// its confidence. The server's labels and `cause` only: one series per server and cause,
/// whatever the phase.
fn verdicts(out: &mut String, series: &[Series<'_>]) {
    let labelled = by_server(series, |s| s.verdict);
    let mut f = family(
        out,
        "inferscope_verdict",
        "gauge",
        "The newest closed window's verdict: 1 for its cause, 0 for every other cause.",
    );
    for (labels, v) in &labelled {
        for cause in Cause::ALL {
            let value = if cause == v.cause { 1.0 } else { 0.0 };
            f.sample(labels, &[("cause", cause.name().to_owned())], value);
        }
    }
    let mut f = family(
        out,
        "inferscope_verdict_confidence",
        "gauge",
        "Confidence of the newest closed window's verdict, 0..1.",
    );
    for (labels, v) in &labelled {
        f.sample(labels, &[], v.confidence);
    }
    hops(out, series);
    calls(out, series);
}

/// A gateway's `inferscope_hop_part_ms{hop}` (each server it called, and `orchestration`, its
/// own time: their parts of its newest window's rise) and `inferscope_hop_holds{hop}` (1 for
/// the one holding the rise, 0 for the others).
fn hops(out: &mut String, series: &[Series<'_>]) {
    let split = by_server(series, |s| s.hops);
    let mut f = family(
        out,
        "inferscope_hop_part_ms",
        "gauge",
        "A gateway's newest window: each called server's part of its rise over its baseline (ms), and orchestration, its own.",
    );
    for (labels, h) in &split {
        for p in &h.parts {
            f.sample(labels, &[("hop", p.hop.clone())], p.part_ms);
        }
    }
    let mut f = family(
        out,
        "inferscope_hop_holds",
        "gauge",
        "A gateway's newest window: 1 for the hop holding its rise, 0 for the others.",
    );
    for (labels, h) in &split {
        for p in &h.parts {
            let holds = h.holder.as_deref() == Some(p.hop.as_str());
            f.sample(
                labels,
                &[("hop", p.hop.clone())],
                f64::from(u8::from(holds)),
            );
        }
    }
}

/// A gateway's `inferscope_hop_calls_per_request{hop}`: the exchanges it asked each server
/// it called for in its newest window, per request it answered there.
fn calls(out: &mut String, series: &[Series<'_>]) {
    let mut f = family(
        out,
        "inferscope_hop_calls_per_request",
        "gauge",
        "A gateway's newest window: the exchanges it asked each server it called for, per request it answered (its tool-call depth at that hop), from the kernel.",
    );
    for (labels, o) in &by_server(series, |s| s.orchestration) {
        for c in &o.calls {
            if let Some(v) = c.per_request {
                f.sample(labels, &[("hop", c.hop.clone())], v);
            }
        }
    }
}

/// What `f` takes of each series that has it, with the server's label alone (one series per
/// server, whatever the phase).
fn by_server<'a, T>(
    series: &[Series<'a>],
    f: impl Fn(&Series<'a>) -> Option<&'a T>,
) -> Vec<(Vec<(&'static str, String)>, &'a T)> {
    series
        .iter()
        .filter_map(|s| {
            let server = Labels {
                server: s.labels.server.clone(),
                ..Labels::default()
            };
            Some((server.pairs(None), f(s)?))
        })
        .collect()
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    // HELP text escapes only backslash and newline (format 0.0.4).
    let help = help.replace('\\', "\\\\").replace('\n', "\\n");
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn sample(
    out: &mut String,
    name: &str,
    labels: &[(&str, String)],
    extra: &[(&str, String)],
    value: f64,
) {
    out.push_str(name);
    let mut first = true;
    for (k, v) in labels.iter().chain(extra) {
        out.push(if first { '{' } else { ',' });
        first = false;
        // OTLP attribute names (`k8s.pod.name`) as Prometheus label names (`k8s_pod_name`).
        let _ = write!(out, "{}=\"{}\"", k.replace('.', "_"), escape_label(v));
    }
    if !first {
        out.push('}');
    }
    out.push(' ');
    out.push_str(&format_value(value));
    out.push('\n');
}

/// The trigger engine's counters as Prometheus text: `inferscope_trigger_firings_total{rule}`
/// (every rule, from 0; `firings` as [`crate::triggers::Counts::get`] gives them) and
/// `inferscope_trigger_actions_dropped_total` (firings whose action could not be queued).
#[must_use]
pub fn trigger_counts(firings: &[(String, u64)], dropped: u64) -> String {
    let mut s = String::from(
        "# HELP inferscope_trigger_firings_total Times each trigger rule fired.\n\
         # TYPE inferscope_trigger_firings_total counter\n",
    );
    for (name, n) in firings {
        let _ = writeln!(
            s,
            "inferscope_trigger_firings_total{{rule=\"{}\"}} {n}",
            escape_label(name)
        );
    }
    s.push_str(
        "# HELP inferscope_trigger_actions_dropped_total Firings whose action was not run (the action queue was full).\n\
         # TYPE inferscope_trigger_actions_dropped_total counter\n",
    );
    let _ = writeln!(s, "inferscope_trigger_actions_dropped_total {dropped}");
    s
}

/// Escapes a label value: backslash, double quote and newline (format 0.0.4).
#[must_use]
pub fn escape_label(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_owned()
    } else if v.is_infinite() {
        (if v > 0.0 { "+Inf" } else { "-Inf" }).to_owned()
    } else {
        // Rust prints f64 without exponent and round-trips exactly, which Prometheus parses.
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::timeline::{LoadSignals, Quantiles};

    #[test]
    fn renders_counters_gauges_probes_and_escapes() {
        let w = Window {
            start_unix_ms: 1_700_000_000_500,
            phase: Some("peak".into()),
            load: Some(LoadSignals {
                requests: 7,
                ttft_ms: Some(Quantiles {
                    p50: 10.0,
                    p95: 20.0,
                    p99: 30.0,
                    max: 40.0,
                }),
                ..LoadSignals::default()
            }),
            ..Window::default()
        };
        let mut totals = Totals::default();
        totals.add(&w);
        totals.add(&w);
        let labels = Labels {
            endpoint: Some("a\"b\\c\nd".into()),
            ..Labels::default()
        };
        let probes = [HookStatus::attached("sched:sched_switch")];
        let drops = [DropCounter::new("kernel_ringbuf", "RUNQ", 3)];
        let verdict = Verdict {
            cause: Cause::KvCache,
            signature: None,
            confidence: 0.75,
            own_confidence: None,
            evidence: Vec::new(),
            contrary: Vec::new(),
            runners_up: Vec::new(),
            missing: Vec::new(),
        };
        let part = |hop: &str, part_ms: f64| crate::attribute::hops::HopPart {
            hop: hop.into(),
            baseline_ms: None,
            value_ms: None,
            part_ms,
            cause: Cause::None,
            confidence: 0.0,
        };
        let hops = Hops {
            rise_ms: 500.0,
            parts: vec![part("port:8001", 450.0), part("orchestration", 50.0)],
            rest_ms: 0.0,
            holder: Some("port:8001".into()),
        };
        let orchestration = Orchestration {
            requests: 4,
            calls: vec![crate::attribute::hops::HopCalls {
                hop: "port:8001".into(),
                calls: 12,
                per_request: Some(3.0),
            }],
        };
        let text = render(&Snapshot {
            series: &[Series {
                latest: Some(&w),
                totals: &totals,
                labels: &labels,
                verdict: Some(&verdict),
                hops: Some(&hops),
                orchestration: Some(&orchestration),
            }],
            probes: &probes,
            drops: &drops,
        });
        assert!(text.contains("# TYPE inferscope_load_requests_total counter\n"));
        assert!(text.contains(
            "inferscope_load_requests_total{phase=\"peak\",endpoint=\"a\\\"b\\\\c\\nd\"} 14\n"
        ));
        assert!(text.contains("stat=\"p95\"} 0.02\n"));
        assert!(text.contains("inferscope_probe_attached{probe=\"sched:sched_switch\"} 1\n"));
        assert!(
            text.contains("inferscope_dropped_total{stage=\"kernel_ringbuf\",what=\"RUNQ\"} 3\n")
        );
        assert!(text.contains("inferscope_window_start_timestamp_seconds{"));
        assert!(text.contains("inferscope_verdict{cause=\"kv_cache\"} 1\n"));
        assert!(text.contains("inferscope_verdict{cause=\"none\"} 0\n"));
        assert_eq!(
            text.matches("inferscope_verdict{").count(),
            Cause::ALL.len()
        );
        assert!(text.contains("inferscope_verdict_confidence 0.75\n"));
        assert!(text.contains("inferscope_hop_part_ms{hop=\"port:8001\"} 450\n"));
        assert!(text.contains("inferscope_hop_holds{hop=\"port:8001\"} 1\n"));
        assert!(text.contains("inferscope_hop_holds{hop=\"orchestration\"} 0\n"));
        assert!(text.contains("inferscope_hop_calls_per_request{hop=\"port:8001\"} 3\n"));
        // No GPU evidence: no GPU series at all.
        assert!(!text.contains("inferscope_gpu"));
        assert_eq!(format_value(f64::INFINITY), "+Inf");
    }

    #[test]
    fn each_server_s_series_carry_its_identity_under_one_header_per_family() {
        use crate::collect::identity::{K8sIdentity, ServerIdentity};
        let w = |requests| Window {
            start_unix_ms: 1_700_000_000_000,
            load: Some(LoadSignals {
                requests,
                ..LoadSignals::default()
            }),
            ..Window::default()
        };
        let (wa, wb) = (w(3), w(5));
        let mut ta = Totals::default();
        ta.add(&wa);
        let mut tb = Totals::default();
        tb.add(&wb);
        let a = Labels::of_server(&ServerIdentity {
            server: "pod:u-1".into(),
            process: None,
            k8s: Some(K8sIdentity {
                pod_uid: "u-1".into(),
                pod_name: Some("vllm-0".into()),
                namespace: Some("llm".into()),
                container_name: Some("engine".into()),
                container_id: "c".into(),
            }),
        });
        let b = Labels::of_server(&ServerIdentity {
            server: "port:8000".into(),
            process: Some("sim".into()),
            k8s: None,
        });
        let verdict = |cause| Verdict {
            cause,
            signature: None,
            confidence: 0.5,
            own_confidence: None,
            evidence: Vec::new(),
            contrary: Vec::new(),
            runners_up: Vec::new(),
            missing: Vec::new(),
        };
        let (va, vb) = (verdict(Cause::KvCache), verdict(Cause::None));
        let text = render(&Snapshot {
            series: &[
                Series {
                    latest: Some(&wa),
                    totals: &ta,
                    labels: &a,
                    verdict: Some(&va),
                    hops: None,
                    orchestration: None,
                },
                Series {
                    latest: Some(&wb),
                    totals: &tb,
                    labels: &b,
                    verdict: Some(&vb),
                    hops: None,
                    orchestration: None,
                },
            ],
            probes: &[],
            drops: &[],
        });
        let pod = "server=\"pod:u-1\",k8s_pod_name=\"vllm-0\",k8s_pod_uid=\"u-1\",k8s_namespace_name=\"llm\",k8s_container_name=\"engine\"";
        assert!(
            text.contains(&format!("inferscope_load_requests_total{{{pod}}} 3\n")),
            "{text}"
        );
        assert!(text.contains("inferscope_load_requests_total{server=\"port:8000\"} 5\n"));
        assert!(text.contains(&format!(
            "inferscope_verdict{{{pod},cause=\"kv_cache\"}} 1\n"
        )));
        assert!(text.contains("inferscope_verdict{server=\"port:8000\",cause=\"none\"} 1\n"));
        assert!(text.contains("inferscope_verdict_confidence{server=\"port:8000\"} 0.5\n"));
        for family in [
            "inferscope_load_requests_total",
            "inferscope_verdict",
            "inferscope_window_start_timestamp_seconds",
        ] {
            assert_eq!(
                text.matches(&format!("# TYPE {family} ")).count(),
                1,
                "{family}"
            );
        }
    }
}

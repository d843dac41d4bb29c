//! The terminal summary: per phase, load achieved, latencies, the verdict with its evidence,
//! where the latency increase went, and what to do. Plain text, one fact per line.

use std::fmt::Write as _;
use std::time::{Duration, UNIX_EPOCH};

use super::Report;
use super::colour::{Style, paint};
use crate::attribute::{Cause, CauseScore, Decomposition, PhaseSummary, fmt_num};
use crate::collect::timeline::Quantiles;

/// Renders the summary of `report`, plain.
#[must_use]
pub fn render(report: &Report) -> String {
    render_with(report, false)
}

/// Renders the summary of `report`, its verdict and warning lines coloured when `colour` (see
/// [`super::colour::wanted`]).
#[must_use]
pub fn render_with(report: &Report, colour: bool) -> String {
    let mut out = String::new();
    let run = &report.run;
    let started =
        humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(run.start_unix_ms));
    let secs = run.end_unix_ms.saturating_sub(run.start_unix_ms) as f64 / 1000.0;
    let _ = writeln!(
        out,
        "inferscope report: scenario {} against {}, {started}, {} s in {} ms windows",
        run.scenario,
        run.target,
        fmt_num(secs),
        run.window_ms
    );
    for b in &report.baselines.0 {
        if let Some(phase) = &b.phase {
            let kind = serde_json::to_value(b.workload)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            let _ = writeln!(out, "baseline ({kind}): phase {phase}");
        }
    }
    for m in &report.missing_evidence {
        let _ = writeln!(out, "missing evidence: {m}");
    }
    // What every phase lacked for the same reason is said once (its signals all phases').
    let reason = |m: &str| m.split_once(": ").map_or(m, |(r, _)| r).to_owned();
    let everywhere: Vec<String> = match report.phases.split_first() {
        Some((first, rest)) if !rest.is_empty() => first
            .missing_decisive
            .iter()
            .map(|m| reason(m))
            .filter(|r| {
                rest.iter()
                    .all(|p| p.missing_decisive.iter().any(|m| reason(m) == *r))
            })
            .collect(),
        _ => Vec::new(),
    };
    for r in &everywhere {
        let _ = writeln!(out, "missing in every phase: {r}");
    }
    for p in &report.phases {
        out.push('\n');
        phase(&mut out, p, &everywhere, colour);
    }
    for f in &report.triggers {
        let at = f.window_start_unix_ms.saturating_sub(run.start_unix_ms) as f64 / 1000.0;
        let outcome = f
            .outcome
            .as_ref()
            .map_or("no outcome".into(), crate::triggers::Outcome::line);
        let _ = writeln!(
            out,
            "trigger {} fired at +{} s: {}; {}: {outcome}",
            f.rule,
            fmt_num(at),
            f.values_line(),
            f.action
        );
    }
    out
}

/// One phase; `said` holds the reasons of missing evidence already said for the whole run.
fn phase(out: &mut String, p: &PhaseSummary, said: &[String], colour: bool) {
    let line = |out: &mut String, style: Style, text: &str| {
        let _ = writeln!(out, "  {}", paint(text, style, colour));
    };
    let l = &p.load;
    let target = l
        .target_rps
        .map_or(String::new(), |t| format!(" (target {})", fmt_num(t)));
    let drain = if p.drain {
        ", after its last send: requests still answering or waiting"
    } else {
        ""
    };
    let _ = writeln!(out, "phase {} ({} windows{drain})", p.name, p.windows);
    for n in &p.notes {
        line(out, Style::Warn, &format!("NOTE: {n}"));
    }
    let _ = writeln!(
        out,
        "  load: {} req/s{target}, {} requests, {} errors, {} output tok/s, {} in flight max",
        fmt_num(l.achieved_rps),
        l.requests,
        l.errors,
        fmt_num(l.output_tokens_per_s),
        l.in_flight_max
    );
    let lat = &p.latency;
    let _ = writeln!(
        out,
        "  latency{}: TTFT {} | ITL {} | E2E {}",
        if lat.exact { "" } else { " (window-averaged)" },
        quantiles(lat.ttft_ms.as_ref()),
        quantiles(lat.itl_ms.as_ref()),
        quantiles(lat.e2e_ms.as_ref())
    );
    if let Some(prefix) = &p.prefix {
        let _ = writeln!(out, "  prefix: {}", prefix.line());
    }
    findings(out, p, colour);
    match &p.lag {
        Some(lag) if p.untrustworthy => line(out, Style::Warn, &format!("WARNING: {}", lag.said)),
        Some(lag) => {
            let _ = writeln!(out, "  note: {}", lag.said);
        }
        None => {}
    }
    let shares = p
        .shares
        .iter()
        .map(|s| format!("{} {:.0}%", s.cause, s.share * 100.0))
        .collect::<Vec<_>>()
        .join(", ");
    let _ = writeln!(out, "  windows: {shares}");
    let evidence = p
        .evidence
        .iter()
        .map(crate::attribute::Evidence::line)
        .collect::<Vec<_>>()
        .join("; ");
    verdict(out, p, &evidence, colour);
    if let Some(c) = &p.confirmation {
        let _ = writeln!(out, "  confirm: {}", c.line());
    }
    if let Some(h) = &p.hops {
        let _ = writeln!(out, "  hops: {}", h.line());
        let _ = writeln!(out, "        {}", h.list());
    }
    for m in &p.marks {
        let _ = writeln!(out, "  event: {m}");
    }
    if !p.load.error_classes.is_empty() {
        let classes: Vec<String> = p
            .load
            .error_classes
            .iter()
            .map(|(c, n)| format!("{} {n}", c.name()))
            .collect();
        let _ = writeln!(out, "  errors by class: {}", classes.join(", "));
    }
    for d in [&p.decomposition, &p.tail_decomposition]
        .into_iter()
        .flatten()
    {
        let _ = writeln!(out, "  {}", decomposition(d));
    }
    for m in p
        .missing_decisive
        .iter()
        .filter(|m| !said.iter().any(|r| m.starts_with(&format!("{r}: "))))
    {
        let _ = writeln!(out, "  missing: {m}");
    }
    if p.dominant != Cause::None {
        let _ = writeln!(out, "  what to do: {}", p.hint);
    }
}

/// What the phase found before any verdict: arrivals never sent, overload, a full resource.
fn findings(out: &mut String, p: &PhaseSummary, colour: bool) {
    let line = |out: &mut String, style: Style, text: &str| {
        let _ = writeln!(out, "  {}", paint(text, style, colour));
    };
    if p.load.unsent > 0 {
        line(
            out,
            Style::Warn,
            &format!(
                "the load generator never sent {} of this phase's {} arrivals (it fell behind \
                 past the phase's end, or was stopped): the server never saw them",
                p.load.unsent,
                p.load.requests + p.load.unsent
            ),
        );
    }
    if let Some(o) = &p.overload {
        line(out, Style::Warn, &o.line());
    }
    if let Some(s) = &p.saturated {
        let _ = writeln!(out, "  full, with requests waiting: {s}");
    }
    if let Some(e) = &p.energy {
        let _ = writeln!(out, "  {}", e.line());
    }
}

/// The verdict line: green for none, yellow for unexplained, bold red for a cause.
fn verdict(out: &mut String, p: &PhaseSummary, evidence: &str, colour: bool) {
    let line = |out: &mut String, style: Style, text: &str| {
        let _ = writeln!(out, "  {}", paint(text, style, colour));
    };
    if p.dominant == Cause::None {
        line(out, Style::Good, "verdict: none (latency at the baseline)");
    } else if p.dominant == Cause::Unexplained {
        line(
            out,
            Style::Warn,
            &format!(
                "verdict: unexplained: latency rose ({evidence}) but no cause is convincing{}",
                p.runners_up.first().map_or(String::new(), |r| format!(
                    " (closest: {} {:.2})",
                    r.cause, r.confidence
                ))
            ),
        );
    } else {
        let named = p.verdict_name();
        line(
            out,
            Style::Bad,
            &format!(
                "verdict: {named} (score {:.2}{}): {evidence}",
                p.confidence,
                p.runners_up
                    .first()
                    .map_or(String::new(), |r| format!(", {}", runner_up(p, r)))
            ),
        );
    }
}

/// `runner-up queue 0.75, explained by kv_cache` or `runner-up network 0.61, lower score`.
fn runner_up(p: &PhaseSummary, r: &CauseScore) -> String {
    let why = match r.explained_by {
        Some(by) => format!("explained by {by}"),
        None if p.causes.iter().any(|c| c.cause == r.cause) => "named too".to_owned(),
        None => "lower score".to_owned(),
    };
    format!("runner-up {} {:.2}, {why}", r.cause, r.confidence)
}

fn quantiles(q: Option<&Quantiles>) -> String {
    q.map_or_else(
        || "n/a".to_owned(),
        |q| format!("p50 {} p99 {}", ms(q.p50), ms(q.p99)),
    )
}

fn ms(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{} s", fmt_num(v / 1000.0))
    } else {
        format!("{} ms", fmt_num(v))
    }
}

/// `TTFT p50 +612 ms over baseline (82 -> 694 ms, requests ranked p40..p60): queue 420,
/// server compute 150, ..., unexplained 0 (sum +612)`.
fn decomposition(d: &Decomposition) -> String {
    let parts: Vec<String> = d
        .parts()
        .iter()
        .map(|(name, v)| format!("{name} {}", fmt_num(*v)))
        .collect();
    let (label, how) = match &d.band {
        Some(b) => (
            b.quantile.clone(),
            format!(
                ", mean of requests ranked p{:.0}..p{:.0}: {} vs {}, {:.0}% seen by the kernel",
                b.from * 100.0,
                b.to * 100.0,
                b.phase_requests,
                b.baseline_requests,
                b.kernel_share * 100.0
            ),
        ),
        None => ("p50".to_owned(), ", window medians".to_owned()),
    };
    let fell = if d.fell_ms > 0.0 {
        format!("; {} ms that fell netted out", fmt_num(d.fell_ms))
    } else {
        String::new()
    };
    if d.increase_ms <= 0.0 {
        return format!(
            "{} {label} {:+.0} ms over baseline ({} -> {} ms{how}): no rise to split",
            d.metric.label(),
            d.increase_ms,
            fmt_num(d.baseline_ms),
            fmt_num(d.value_ms),
        );
    }
    format!(
        "{} {label} {:+.0} ms over baseline ({} -> {} ms{how}): {} (sum {:+.0}{fell})",
        d.metric.label(),
        d.increase_ms,
        fmt_num(d.baseline_ms),
        fmt_num(d.value_ms),
        parts.join(", "),
        d.sum_ms(),
    )
}

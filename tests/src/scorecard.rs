//! What `cargo xtask bench attribution` prints from the cases' reports: a row per case, the
//! sensitivity of each sweep (the weakest strength found, windows from the fault's onset to the
//! first right verdict), the confusion matrix of expected x verdict, and precision and recall
//! per cause.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use serde_json::Value;

use crate::cases::Case;
use crate::sweeps::Sweep;

/// One case's outcome.
pub struct Row {
    /// Case name.
    pub name: &'static str,
    /// Its mechanism (a sweep's strength).
    pub mechanism: &'static str,
    /// Expected verdict of the peak (`a+b` for two causes, in name order).
    pub expected: &'static str,
    /// The peak's verdict: its dominant cause, or the two causes it names (`a+b`).
    pub got: String,
    /// Share of the peak's windows with the dominant cause.
    pub share: f64,
    /// The peak's score.
    pub confidence: f64,
    /// Windows from the peak's first to the first with the expected verdict (`None`: never).
    pub first_right: Option<usize>,
    /// The other phases' verdicts.
    pub others: String,
    /// Whether the verdict is right (a healthy case: every phase `none`).
    pub ok: bool,
    /// A sweep's step too weak to raise the client's latency: expected `none`.
    pub no_rise: bool,
    /// The share of the peak's median rise its decomposition leaves `unexplained`.
    pub unexplained: Option<f64>,
    /// The share of the peak's requests joined to the kernel's exchanges.
    pub joined: Option<f64>,
}

/// Where at least this share of a phase's requests are joined to the kernel, `unexplained` is
/// at most [`UNEXPLAINED_BAR`] of its rise: the kernel saw where their time went.
pub const JOINED_BAR: f64 = 0.8;
/// See [`JOINED_BAR`].
pub const UNEXPLAINED_BAR: f64 = 0.2;

/// The share of `phase`'s median rise its decomposition leaves unexplained.
fn unexplained_share(phase: &Value) -> Option<f64> {
    let d = &phase["decomposition"];
    let rise = d["increase_ms"].as_f64().filter(|r| *r > 0.0)?;
    Some(d["unexplained_ms"].as_f64()? / rise)
}

/// The share of `phase`'s requests joined to the kernel: the joined requests of its windows
/// over the requests they started.
fn joined_share(report: &Value, phase: &str) -> Option<f64> {
    let windows = report["timeline"]["windows"].as_array()?;
    let (mut joined, mut requests) = (0u64, 0u64);
    for w in windows.iter().filter(|w| w["phase"] == phase) {
        joined += w["net"]["joined_requests"].as_u64().unwrap_or(0);
        requests += w["load"]["requests"].as_u64().unwrap_or(0);
    }
    (requests > 0).then(|| joined as f64 / requests as f64)
}

/// The outcome of a sweep's step: a strength that named nothing and raised none of the
/// client's latencies (see [`latency_rose`]) made no bottleneck, and its right verdict is
/// `none`.
#[must_use]
pub fn step_row(case: &Case, report: &Value) -> Row {
    let r = row(case, report);
    if r.ok || latency_rose(report) {
        return r;
    }
    let mut r = row(
        &Case {
            expected: "none",
            ..*case
        },
        report,
    );
    r.no_rise = true;
    r
}

/// Whether the peak's latency rose over the baseline's by the product's own measure of a rise
/// (`attribute::evaluate`'s, for a window): a TTFT or E2E p50 x1.5 and +20 ms, or a TTFT, ITL
/// or E2E p99 x2 and +50 ms over the baseline windows' median, in at least two of the peak's
/// windows (one window is an anecdote, as a phase's verdict holds too).
#[must_use]
pub fn latency_rose(report: &Value) -> bool {
    const TESTS: [(&str, &str, f64, f64); 5] = [
        ("ttft_ms", "p50", 1.5, 20.0),
        ("e2e_ms", "p50", 1.5, 20.0),
        ("ttft_ms", "p99", 2.0, 50.0),
        ("itl_ms", "p99", 2.0, 50.0),
        ("e2e_ms", "p99", 2.0, 50.0),
    ];
    let windows = report["timeline"]["windows"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let of = |phase: &str| -> Vec<&Value> {
        windows
            .iter()
            .filter(|w| w["phase"] == phase && w["load"].is_object())
            .collect()
    };
    let (base, peak) = (of("baseline"), of("peak"));
    let median = |m: &str, q: &str| {
        let mut v: Vec<f64> = base
            .iter()
            .filter_map(|w| w["load"][m][q].as_f64())
            .collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    };
    let levels: Vec<Option<f64>> = TESTS.iter().map(|t| median(t.0, t.1)).collect();
    let rose = peak
        .iter()
        .filter(|w| {
            TESTS.iter().zip(&levels).any(|(&(m, q, ratio, delta), b)| {
                match (*b, w["load"][m][q].as_f64()) {
                    (Some(b), Some(v)) => v >= ratio * b && v - b >= delta,
                    _ => false,
                }
            })
        })
        .count();
    rose >= 2
}

/// The outcome of `case` from its report.json.
#[must_use]
pub fn row(case: &Case, report: &Value) -> Row {
    let phases = report["phases"].as_array().cloned().unwrap_or_default();
    let peak = phases.iter().find(|p| p["name"] == "peak");
    let dominant = peak
        .and_then(|p| p["dominant"].as_str())
        .unwrap_or("?")
        .to_owned();
    // Two causes in name order, as expected verdicts are written (`kv_cache+network`).
    let mut named: Vec<&str> = peak
        .and_then(|p| p["causes"].as_array())
        .map(|c| c.iter().filter_map(|c| c["cause"].as_str()).collect())
        .unwrap_or_default();
    named.sort_unstable();
    // A pipeline's peak names the hop holding the rise and the cause inside it.
    let hop = peak.and_then(|p| {
        let hops = &p["hops"];
        let holder = hops["holder"].as_str()?;
        let part = hops["parts"]
            .as_array()?
            .iter()
            .find(|h| h["hop"] == holder)?;
        Some(match part["cause"].as_str() {
            Some(inside) if holder != "orchestration" => format!("{holder}:{inside}"),
            _ => holder.to_owned(),
        })
    });
    let got = if let Some(hop) = hop {
        hop
    } else if named.len() > 1 {
        named.join("+")
    } else {
        dominant.clone()
    };
    let share = peak
        .and_then(|p| p["shares"].as_array())
        .and_then(|s| s.iter().find(|s| s["cause"] == dominant.as_str()))
        .and_then(|s| s["share"].as_f64())
        .unwrap_or(0.0);
    let others: Vec<String> = phases
        .iter()
        .filter(|p| p["name"] != "peak")
        .map(|p| {
            format!(
                "{} {}",
                p["name"].as_str().unwrap_or("?"),
                p["dominant"].as_str().unwrap_or("?")
            )
        })
        .collect();
    let quiet_baseline = phases
        .iter()
        .filter(|p| p["name"] == "baseline")
        .all(|p| p["dominant"] == "none");
    // Healthy: every phase `none`. Otherwise the peak's verdict, and a quiet baseline.
    let ok = if case.expected == "none" {
        phases.iter().all(|p| p["dominant"] == "none")
    } else {
        got == case.expected && quiet_baseline
    };
    Row {
        name: case.name,
        mechanism: case.mechanism,
        expected: case.expected,
        confidence: peak.and_then(|p| p["confidence"].as_f64()).unwrap_or(0.0),
        first_right: first_right(report, case.expected),
        got,
        share,
        others: others.join(", "),
        ok,
        no_rise: false,
        unexplained: peak.and_then(unexplained_share),
        joined: joined_share(report, "peak"),
    }
}

/// Windows from the peak's first window to the first whose verdict is (one of) `expected`.
fn first_right(report: &Value, expected: &str) -> Option<usize> {
    let peak: Vec<&Value> = report["verdicts"]
        .as_array()?
        .iter()
        .filter(|v| v["phase"] == "peak")
        .collect();
    peak.iter().position(|v| {
        v["verdict"]["cause"]
            .as_str()
            .is_some_and(|c| expected.split('+').any(|e| e == c))
    })
}

/// The rows as the per-case table.
#[must_use]
pub fn cases_table(rows: &[Row]) -> String {
    let mut out = format!(
        "{:<24} {:<17} {:<17} {:>6} {:>5} {:>7} {:>7}  {:<4} mechanism; other phases\n",
        "case", "expected", "peak verdict", "share", "score", "unexpl", "joined", "ok"
    );
    let pct = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{:.0}%", v * 100.0));
    for r in rows {
        let _ = writeln!(
            out,
            "{:<24} {:<17} {:<17} {:>5.0}% {:>5.2} {:>7} {:>7}  {:<4} {}; {}",
            r.name,
            r.expected,
            r.got,
            r.share * 100.0,
            r.confidence,
            pct(r.unexplained),
            pct(r.joined),
            if r.ok { "yes" } else { "NO" },
            r.mechanism,
            r.others
        );
    }
    let over: Vec<&str> = rows
        .iter()
        .filter(|r| {
            r.joined.is_some_and(|j| j >= JOINED_BAR)
                && r.unexplained.is_some_and(|u| u > UNEXPLAINED_BAR)
        })
        .map(|r| r.name)
        .collect();
    let _ = writeln!(
        out,
        "unexplained within {:.0}% of the rise where >= {:.0}% of requests are joined: {}",
        UNEXPLAINED_BAR * 100.0,
        JOINED_BAR * 100.0,
        if over.is_empty() {
            "every case".to_owned()
        } else {
            format!("NOT in {}", over.join(", "))
        }
    );
    out
}

/// The sensitivity table (markdown): per sweep, each strength's verdict and windows to the
/// first right one, and the weakest strength found.
#[must_use]
pub fn sensitivity(sweeps: &[Sweep], rows: &[Row]) -> String {
    let mut out = String::from(
        "| cause | knob | strength: verdict (windows to first right verdict) | weakest found |\n|---|---|---|---|\n",
    );
    for s in sweeps {
        let of: Vec<&Row> = s
            .steps
            .iter()
            .filter_map(|c| rows.iter().find(|r| r.name == c.name))
            .collect();
        if of.is_empty() {
            continue;
        }
        let cells: Vec<String> = of
            .iter()
            .map(|r| {
                if r.no_rise {
                    return format!("{}: {} (no rise)", r.mechanism, r.got);
                }
                let windows = r.first_right.map_or("never".to_owned(), |w| w.to_string());
                format!("{}: {} ({windows})", r.mechanism, r.got)
            })
            .collect();
        // Strongest first: the weakest found is the last right one that raised latency.
        let weakest = of
            .iter()
            .rfind(|r| r.ok && !r.no_rise)
            .map_or("none found", |r| r.mechanism);
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {weakest} |",
            s.expected,
            s.knob,
            cells.join("; ")
        );
    }
    out
}

/// The confusion matrix (markdown): a row per expected verdict, a column per verdict got.
#[must_use]
pub fn confusion(rows: &[Row]) -> String {
    let labels: BTreeSet<&str> = rows
        .iter()
        .flat_map(|r| [r.expected, r.got.as_str()])
        .collect();
    let mut out = String::from("| expected \\ verdict |");
    for l in &labels {
        let _ = write!(out, " {l} |");
    }
    out.push_str("\n|---|");
    out.push_str(&"---|".repeat(labels.len()));
    out.push('\n');
    for e in labels
        .iter()
        .filter(|e| rows.iter().any(|r| r.expected == **e))
    {
        let _ = write!(out, "| {e} |");
        for g in &labels {
            let n = rows
                .iter()
                .filter(|r| r.expected == *e && r.got == *g)
                .count();
            if n == 0 {
                out.push_str(" |");
            } else {
                let _ = write!(out, " {n} |");
            }
        }
        out.push('\n');
    }
    out
}

/// Precision and recall per expected cause, one line each: a cause named in a two-cause
/// verdict counts for each of its causes.
#[must_use]
pub fn precision_recall(rows: &[Row]) -> String {
    let has = |label: &str, cause: &str| label.split('+').any(|c| c == cause);
    let causes: BTreeSet<&str> = rows
        .iter()
        .flat_map(|r| r.expected.split('+'))
        .filter(|c| *c != "none")
        .collect();
    let mut out = String::new();
    for c in causes {
        let named = rows.iter().filter(|r| has(&r.got, c)).count();
        let expected = rows.iter().filter(|r| has(r.expected, c)).count();
        let right = rows
            .iter()
            .filter(|r| has(&r.got, c) && has(r.expected, c))
            .count();
        let pct = |a: usize, b: usize| {
            if b == 0 {
                "n/a".to_owned()
            } else {
                format!("{:.0}%", 100.0 * a as f64 / b as f64)
            }
        };
        let _ = writeln!(
            out,
            "{c}: precision {} ({right} of {named} named), recall {} ({right} of {expected} expected)",
            pct(right, named),
            pct(right, expected)
        );
    }
    out
}

/// Replaces the part of `doc` between the bench's markers with `table`; `None` when the markers
/// are missing.
#[must_use]
pub fn publish(doc: &str, table: &str) -> Option<String> {
    const BEGIN: &str = "<!-- bench attribution: begin -->";
    const END: &str = "<!-- bench attribution: end -->";
    let a = doc.find(BEGIN)? + BEGIN.len();
    let b = doc[a..].find(END)? + a;
    Some(format!("{}\n{table}{}", &doc[..a], &doc[b..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &'static str, expected: &'static str, got: &str) -> Row {
        Row {
            name,
            mechanism: name,
            expected,
            got: got.to_owned(),
            share: 1.0,
            confidence: 0.9,
            first_right: Some(0),
            others: String::new(),
            ok: expected == got,
            no_rise: false,
            unexplained: None,
            joined: None,
        }
    }

    #[test]
    fn the_matrix_counts_expected_by_got_and_two_causes_count_for_each() {
        let rows = [
            row("a", "queue", "queue"),
            row("b", "queue", "none"),
            row("c", "kv_cache+network", "kv_cache+network"),
            row("d", "network", "network"),
            row("e", "none", "network"),
        ];
        let m = confusion(&rows);
        assert!(m.contains("| queue | | | 1 | 1 |"), "{m}");
        let pr = precision_recall(&rows);
        assert!(
            pr.contains("network: precision 67% (2 of 3 named), recall 100% (2 of 2 expected)"),
            "{pr}"
        );
        assert!(
            pr.contains("queue: precision 100% (1 of 1 named), recall 50%"),
            "{pr}"
        );
        assert!(!pr.contains("none:"), "{pr}");
    }

    #[test]
    fn the_doc_gets_the_table_between_its_markers_only() {
        let doc = "a\n<!-- bench attribution: begin -->\nold\n<!-- bench attribution: end -->\nb\n";
        let new = publish(doc, "new\n").unwrap();
        assert_eq!(
            new,
            "a\n<!-- bench attribution: begin -->\nnew\n<!-- bench attribution: end -->\nb\n"
        );
        assert!(publish("no markers", "x").is_none());
    }

    /// A report with 4 baseline windows of E2E p99 180 ms and peak windows of these E2E p99s
    /// (TTFT and ITL flat), whose peak reads `got`.
    fn report(peak_e2e_p99: &[f64], got: &str) -> Value {
        let window = |phase: &str, e2e: f64| {
            serde_json::json!({"phase": phase, "load": {
                "ttft_ms": {"p50": 5.0, "p99": 9.0}, "itl_ms": {"p50": 2.0, "p99": 4.0},
                "e2e_ms": {"p50": 150.0, "p99": e2e}}})
        };
        let windows: Vec<Value> = [180.0; 4]
            .iter()
            .map(|&e| window("baseline", e))
            .chain(peak_e2e_p99.iter().map(|&e| window("peak", e)))
            .collect();
        serde_json::json!({
            "timeline": {"windows": windows},
            "phases": [{"name": "baseline", "dominant": "none"}, {"name": "peak", "dominant": got}],
        })
    }

    #[test]
    fn a_step_too_weak_to_raise_latency_is_right_as_none_and_not_found() {
        let case = |name| Case {
            name,
            mechanism: name,
            expected: "network",
            run: || Value::Null,
        };
        // 10%: named. 3%: one window's tail x4 (an anecdote) and 1%: nothing, both read none.
        // 0.5%: two windows' tails x2 and +180 ms, and nothing named: a miss.
        let rows = [
            step_row(&case("10%"), &report(&[400.0, 500.0, 170.0], "network")),
            step_row(&case("3%"), &report(&[720.0, 170.0, 190.0], "none")),
            step_row(&case("1%"), &report(&[170.0, 190.0, 185.0], "none")),
            step_row(&case("0.5%"), &report(&[360.0, 170.0, 400.0], "none")),
        ];
        let ok: Vec<(bool, bool)> = rows.iter().map(|r| (r.ok, r.no_rise)).collect();
        assert_eq!(
            ok,
            [(true, false), (true, true), (true, true), (false, false)]
        );
        assert_eq!(rows[1].expected, "none");
        assert_eq!(rows[3].expected, "network");
        let sweep = Sweep {
            expected: "network",
            knob: "loss",
            steps: ["10%", "3%", "1%", "0.5%"].map(case).into(),
        };
        let t = sensitivity(&[sweep], &rows);
        assert!(
            t.contains(
                "| 10%: network (never); 3%: none (no rise); 1%: none (no rise); 0.5%: none (never) | 10% |"
            ),
            "{t}"
        );
    }
}

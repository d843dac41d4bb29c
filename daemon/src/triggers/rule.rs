//! Trigger rules: the YAML schema (`triggers:` in a scenario or a `--triggers` file), parsed
//! once into typed conditions and actions.
//!
//! A condition is one of
//! - `METRIC OP VALUE` with OP `<`, `<=`, `>`, `>=`, `==`, `!=` (`kv_usage >= 0.95`,
//!   `error_rate >= 5%`, `ttft_p95 > 2s`);
//! - `METRIC rises_by [>|>=] VALUE` / `METRIC falls_by [>|>=] VALUE`: against the baseline
//!   (see [`super::baseline`]); VALUE in the metric's unit (`300ms`), or a percentage of the
//!   baseline (`50%`); without an operator, `>=`;
//! - `verdict == CAUSE` / `verdict != CAUSE` (`kv_cache`, `queue`, ... `none`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::metric::{Metric, Unit};
use crate::{attribute::Cause, loadgen::scenario::WrittenTrigger};

/// A comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum Op {
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `==`
    Eq,
    /// `!=`
    Ne,
}

impl Op {
    /// Whether `a OP b`.
    #[must_use]
    pub fn holds(self, a: f64, b: f64) -> bool {
        match self {
            Op::Lt => a < b,
            Op::Le => a <= b,
            Op::Gt => a > b,
            Op::Ge => a >= b,
            Op::Eq => (a - b).abs() <= f64::EPSILON * a.abs().max(b.abs()).max(1.0),
            Op::Ne => !Op::Eq.holds(a, b),
        }
    }

    fn split(text: &str) -> Option<(&str, Op, &str)> {
        // Two-character operators first: `<=` is not `<` followed by `=`.
        [
            ("<=", Op::Le),
            (">=", Op::Ge),
            ("==", Op::Eq),
            ("!=", Op::Ne),
            ("<", Op::Lt),
            (">", Op::Gt),
        ]
        .iter()
        .find_map(|(s, op)| {
            text.find(s)
                .map(|i| (text[..i].trim(), *op, text[i + s.len()..].trim()))
        })
    }
}

/// How a rise or fall is measured.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum Delta {
    /// By at least this much, in the metric's unit.
    Absolute(f64),
    /// By at least this share of the baseline (0.5 = 50%).
    Relative(f64),
}

/// One condition on a closed window.
#[derive(Debug, Clone, PartialEq)]
pub enum Condition {
    /// `METRIC OP VALUE`, VALUE in the metric's unit.
    Compare {
        /// The metric.
        metric: Metric,
        /// The comparison.
        op: Op,
        /// The threshold, in the metric's unit.
        value: f64,
    },
    /// `METRIC rises_by|falls_by [OP] VALUE`: the change over the baseline.
    Change {
        /// The metric.
        metric: Metric,
        /// `true` for `rises_by`, `false` for `falls_by`.
        rise: bool,
        /// `>` or `>=`.
        op: Op,
        /// How much.
        by: Delta,
    },
    /// `verdict == CAUSE` (`equal`) or `verdict != CAUSE`.
    Verdict {
        /// The cause.
        cause: Cause,
        /// `==` when true, `!=` when false.
        equal: bool,
    },
}

/// An action of a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Spawn this program with these arguments (no shell).
    Run(Vec<String>),
    /// POST the firing as JSON to this `http://` URL.
    Webhook(String),
}

/// One parsed trigger rule.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// Unique name.
    pub name: String,
    /// The conditions as written (for reports and errors), in order.
    pub when_text: Vec<String>,
    /// The conditions; all must hold.
    pub when: Vec<Condition>,
    /// How long all must hold without a break before the rule fires.
    pub hold: Duration,
    /// Least time between two firings.
    pub cooldown: Duration,
    /// What it does.
    pub action: Action,
    /// How long the action may take (each webhook attempt, or the whole command).
    pub timeout: Duration,
}

impl Rule {
    /// The metrics the conditions read, without repeats, in order.
    #[must_use]
    pub fn metrics(&self) -> Vec<Metric> {
        let mut v = Vec::new();
        for c in &self.when {
            if let Condition::Compare { metric, .. } | Condition::Change { metric, .. } = c
                && !v.contains(metric)
            {
                v.push(*metric);
            }
        }
        v
    }
}

/// A rule that cannot be used: the text to point at (for the line) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{msg}")]
pub struct RuleError {
    /// Text of the file to find the line by.
    pub needle: String,
    /// What is wrong and what to do.
    pub msg: String,
}

/// Default time a `run:` command may take.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(30);
/// Default time each webhook attempt may take.
pub const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(5);

impl Rule {
    /// Parses the conditions of a rule as written and checks it.
    pub fn parse(w: WrittenTrigger) -> Result<Self, RuleError> {
        let name = w.name.trim().to_owned();
        let at = format!("name: {}", w.name);
        let err = |needle: &str, msg: String| RuleError {
            needle: needle.to_owned(),
            msg: format!("trigger `{name}`: {msg}"),
        };
        // The text the error is about comes first: the scenario loader points at the line of
        // the first quoted text of a message.
        let quoted = |needle: &str, msg: String| RuleError {
            needle: needle.to_owned(),
            msg,
        };
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
        {
            return Err(err(
                &at,
                "name must be letters, digits, `_`, `-` or `.` (it labels a metric)".into(),
            ));
        }
        let when_text = w.when.into_vec();
        if when_text.is_empty() {
            return Err(err(
                &at,
                "`when` is empty: give at least one condition, e.g. `kv_usage >= 0.95`".into(),
            ));
        }
        let when = when_text
            .iter()
            .map(|t| {
                parse_condition(t)
                    .map_err(|why| quoted(t, format!("condition `{t}` of trigger `{name}`: {why}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let duration = |field: &str, v: Option<&str>, default: Duration| match v {
            None => Ok(default),
            Some(s) => crate::duration::parse(s).map_err(|e| {
                quoted(
                    &format!("{field}: {s}"),
                    format!("`{field}: {s}` of trigger `{name}`: {e}"),
                )
            }),
        };
        let hold = duration("for", w.hold.as_deref(), Duration::ZERO)?;
        let cooldown = duration("cooldown", w.cooldown.as_deref(), Duration::ZERO)?;
        let action = match (w.run, w.webhook) {
            (Some(argv), None) => {
                if argv.first().is_none_or(|p| p.trim().is_empty()) {
                    return Err(err(
                        "run:",
                        "`run` is empty: give the program and its arguments, e.g. `run: [/usr/local/bin/rollback, --now]`".into(),
                    ));
                }
                Action::Run(argv)
            }
            (None, Some(url)) => {
                check_webhook(&url).map_err(|why| {
                    quoted(&url, format!("webhook `{url}` of trigger `{name}`: {why}"))
                })?;
                Action::Webhook(url)
            }
            (Some(_), Some(_)) => {
                return Err(err(&at, "give either `run` or `webhook`, not both".into()));
            }
            (None, None) => {
                return Err(err(
                    &at,
                    "no action: give `run: [program, args...]` or `webhook: http://...`".into(),
                ));
            }
        };
        let default_timeout = match action {
            Action::Run(_) => RUN_TIMEOUT,
            Action::Webhook(_) => WEBHOOK_TIMEOUT,
        };
        let timeout = duration("timeout", w.timeout.as_deref(), default_timeout)?;
        if timeout.is_zero() {
            return Err(err("timeout:", "`timeout` must be > 0".into()));
        }
        Ok(Rule {
            name,
            when_text,
            when,
            hold,
            cooldown,
            action,
            timeout,
        })
    }
}

/// Parses rules and checks that their names are unique.
pub fn parse_rules(raw: Vec<WrittenTrigger>) -> Result<Vec<Rule>, RuleError> {
    let mut rules: Vec<Rule> = Vec::with_capacity(raw.len());
    for r in raw {
        let rule = Rule::parse(r)?;
        if rules.iter().any(|o| o.name == rule.name) {
            return Err(RuleError {
                needle: format!("name: {}", rule.name),
                msg: format!("trigger name `{}` is used twice", rule.name),
            });
        }
        rules.push(rule);
    }
    Ok(rules)
}

/// Whether a webhook URL can be used at all (`http://HOST[:PORT]/...`).
fn check_webhook(url: &str) -> Result<(), String> {
    let uri: hyper::Uri = url
        .parse()
        .map_err(|e| format!("not a URL ({e}); e.g. http://127.0.0.1:9000/hook"))?;
    if uri.scheme_str() != Some("http") {
        return Err(
            "only http:// URLs (for https, point it at a local relay that forwards)".into(),
        );
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err("no host; e.g. http://127.0.0.1:9000/hook".into());
    }
    Ok(())
}

/// The host of a webhook URL (checked by [`Rule::parse`]).
#[must_use]
pub fn webhook_host(url: &str) -> String {
    url.parse::<hyper::Uri>()
        .ok()
        .and_then(|u| u.host().map(str::to_owned))
        .unwrap_or_default()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned()
}

/// Parses one condition.
pub fn parse_condition(text: &str) -> Result<Condition, String> {
    let text = text.trim();
    for (word, rise) in [("rises_by", true), ("falls_by", false)] {
        if let Some(i) = text.find(word) {
            let name = text[..i].trim();
            let rest = text[i + word.len()..].trim();
            let metric = metric(name)?;
            let (op, value) = if let Some(v) = rest.strip_prefix(">=") {
                (Op::Ge, v.trim())
            } else if let Some(v) = rest.strip_prefix('>') {
                (Op::Gt, v.trim())
            } else {
                (Op::Ge, rest)
            };
            let by = if let Some(p) = value.strip_suffix('%') {
                let p: f64 = p
                    .trim()
                    .parse()
                    .map_err(|_| format!("bad percentage `{value}`"))?;
                Delta::Relative(p / 100.0)
            } else {
                Delta::Absolute(threshold(metric, value)?)
            };
            let bad = match by {
                Delta::Absolute(v) | Delta::Relative(v) => !(v.is_finite() && v >= 0.0),
            };
            if bad {
                return Err(format!("`{word}` needs a value >= 0, not `{value}`"));
            }
            return Ok(Condition::Change {
                metric,
                rise,
                op,
                by,
            });
        }
    }
    let (name, op, value) = Op::split(text).ok_or(
        "no operator: write `METRIC OP VALUE` (OP one of < <= > >= == !=), `METRIC rises_by VALUE` or `verdict == CAUSE`",
    )?;
    if name == "verdict" {
        let cause = Cause::ALL
            .iter()
            .find(|c| c.name() == value)
            .ok_or_else(|| {
                let names: Vec<&str> = Cause::ALL.iter().map(|c| c.name()).collect();
                format!("unknown verdict `{value}`; one of {}", names.join(", "))
            })?;
        let equal = match op {
            Op::Eq => true,
            Op::Ne => false,
            _ => return Err("a verdict is compared with `==` or `!=`".into()),
        };
        return Ok(Condition::Verdict {
            cause: *cause,
            equal,
        });
    }
    let metric = metric(name)?;
    Ok(Condition::Compare {
        metric,
        op,
        value: threshold(metric, value)?,
    })
}

fn metric(name: &str) -> Result<Metric, String> {
    Metric::parse(name).ok_or_else(|| {
        format!(
            "unknown metric `{name}`; known: {} (a `_ms`/`_us` suffix may be left out)",
            Metric::names().join(", ")
        )
    })
}

/// A threshold in `metric`'s unit.
fn threshold(metric: Metric, value: &str) -> Result<f64, String> {
    let v = match metric.unit() {
        Unit::Ms => value.parse::<f64>().ok().or_else(|| {
            crate::duration::parse(value)
                .ok()
                .map(|d| d.as_secs_f64() * 1e3)
        }),
        Unit::Us => value.parse::<f64>().ok().or_else(|| {
            crate::duration::parse(value)
                .ok()
                .map(|d| d.as_secs_f64() * 1e6)
        }),
        Unit::Ratio => match value.strip_suffix('%') {
            Some(p) => p.trim().parse::<f64>().ok().map(|p| p / 100.0),
            None => value.parse().ok(),
        },
        Unit::Number => value.parse().ok(),
    };
    let hint = match metric.unit() {
        Unit::Ms | Unit::Us => "a duration such as 300ms or 1.5s",
        Unit::Ratio => "a percentage such as 5% or a fraction such as 0.05",
        Unit::Number => "a plain number",
    };
    v.filter(|v: &f64| v.is_finite())
        .ok_or_else(|| format!("bad value `{value}` for `{metric}`: give {hint}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribute::Signal;

    #[test]
    fn conditions_parse_into_types() {
        assert_eq!(
            parse_condition("ttft_p95 rises_by > 300ms").unwrap(),
            Condition::Change {
                metric: Metric::Signal(Signal::TtftP95Ms),
                rise: true,
                op: Op::Gt,
                by: Delta::Absolute(300.0),
            }
        );
        assert_eq!(
            parse_condition("error_rate >= 5%").unwrap(),
            Condition::Compare {
                metric: Metric::Signal(Signal::ErrorRate),
                op: Op::Ge,
                value: 0.05,
            }
        );
        assert_eq!(
            parse_condition("verdict == kv_cache").unwrap(),
            Condition::Verdict {
                cause: Cause::KvCache,
                equal: true
            }
        );
        assert_eq!(
            parse_condition("recall falls_by 10%").unwrap(),
            Condition::Change {
                metric: Metric::Signal(Signal::RecallMean),
                rise: false,
                op: Op::Ge,
                by: Delta::Relative(0.1),
            }
        );
        assert_eq!(
            parse_condition("runq_p99 > 2ms").unwrap(),
            Condition::Compare {
                metric: Metric::Signal(Signal::RunqP99Us),
                op: Op::Gt,
                value: 2000.0,
            }
        );
    }

    #[test]
    fn bad_conditions_say_what_to_write() {
        for (text, says) in [
            ("ttft_p95 300ms", "no operator"),
            ("ttfb > 3ms", "unknown metric `ttfb`"),
            ("kv_usage > 5ms", "percentage"),
            ("verdict == slow", "unknown verdict"),
            ("verdict > kv_cache", "`==` or `!=`"),
            ("ttft_p95 rises_by -3ms", "bad value `-3ms`"),
            ("ttft_p95 rises_by -3%", "value >= 0"),
        ] {
            let e = parse_condition(text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    fn raw(yaml: &str) -> WrittenTrigger {
        serde_norway::from_str(yaml).unwrap()
    }

    fn parse(yaml: &str) -> Result<Rule, RuleError> {
        Rule::parse(raw(yaml))
    }

    #[test]
    fn rules_check_their_action_and_durations() {
        let r = parse(
            "{name: rb, when: [kv_usage >= 0.95], for: 2m, cooldown: 10m, run: [rollback, --now]}",
        )
        .unwrap();
        assert_eq!(r.hold, Duration::from_mins(2));
        assert_eq!(r.cooldown, Duration::from_mins(10));
        assert_eq!(r.timeout, RUN_TIMEOUT);
        assert_eq!(
            r.action,
            Action::Run(vec!["rollback".into(), "--now".into()])
        );
        let w = parse("{name: w, when: verdict == queue, webhook: 'http://[::1]:9/h'}").unwrap();
        assert_eq!(w.action, Action::Webhook("http://[::1]:9/h".into()));
        assert_eq!(webhook_host("http://[::1]:9/h"), "::1");
        for (yaml, says) in [
            ("{name: a, when: [], run: [x]}", "`when` is empty"),
            ("{name: a, when: [kv_usage > 1], run: []}", "`run` is empty"),
            ("{name: a, when: [kv_usage > 1]}", "no action"),
            (
                "{name: a, when: [kv_usage > 1], run: [x], webhook: 'http://h/'}",
                "not both",
            ),
            (
                "{name: a, when: [kv_usage > 1], webhook: 'https://h/'}",
                "only http://",
            ),
            (
                "{name: a, when: [kv_usage > 1], for: soon, run: [x]}",
                "bad duration \"soon\"",
            ),
            (
                "{name: 'a b', when: [kv_usage > 1], run: [x]}",
                "name must be",
            ),
        ] {
            let e = parse(yaml).unwrap_err();
            assert!(e.msg.contains(says), "{yaml}: {e}");
        }
        let twice = parse_rules(vec![
            raw("{name: a, when: [kv_usage > 1], run: [x]}"),
            raw("{name: a, when: [kv_usage > 1], run: [y]}"),
        ])
        .unwrap_err();
        assert!(twice.msg.contains("used twice"), "{twice}");
    }
}

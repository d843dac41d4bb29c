//! Trigger rules: the closed loop from measurement to action (the seed's "p95 rises by > 300 ms
//! and error rate >= 5% for 2 minutes -> roll back").
//!
//! Rules ([`rule`]) are read once from a scenario's `triggers:` block or a `--triggers` file.
//! The one collection pipeline ([`crate::node::Node`]) calls the [`Engine`] as each server's
//! window closes (an observer); the engine reads the window's metrics ([`metric`]) and its
//! verdict, keeps each rule's episode ([`episode`]) and baselines per server (a rule fires
//! once per episode of each server) and hands the firings, with the server's identity, to the
//! action task ([`action`]), which runs them off the window loop. Firings are counted ([`Counts`], the
//! daemon's `inferscope_trigger_firings_total{rule}`) and come back with their outcomes.
//!
//! ```
//! # async fn demo() {
//! use inferscope::{dial::Reach, triggers::{self, Engine}};
//! let rules = triggers::parse_yaml(
//!     "triggers:\n  - {name: kv, when: [verdict == kv_cache], for: 60s, run: [/bin/true]}\n",
//!     "t.yaml",
//! )
//! .unwrap();
//! let started = triggers::start(Engine::new(rules), None, Reach::Loopback);
//! // node_options.observers.push(started.observer);
//! # drop(started.observer);
//! let firings = started.runner.await.unwrap(); // once the node has stopped
//! # let _ = firings;
//! # }
//! ```

pub mod action;
pub mod baseline;
pub mod episode;
pub mod live;
pub mod metric;
pub mod rule;

use std::{
    collections::BTreeMap,
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

pub use rule::{Action, Condition, Rule};

use self::{
    action::{Job, OnDone},
    baseline::Baseline,
    episode::Episode,
    live::LiveLoad,
    metric::Metric,
    rule::Delta,
};
use crate::{
    attribute::{Verdict, WindowVerdict},
    collect::{identity::ServerIdentity, timeline::Window},
    dial::Reach,
    loadgen::scenario::{Scenario, WrittenTrigger, line_of},
    node::{MAX_SERVERS, Observer},
};

/// Firings waiting for the action task at most; more are dropped and counted.
const QUEUE: usize = 64;

/// What became of a firing's action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    /// The command ran and exited (or was ended by a signal).
    Exited {
        /// Exit code.
        code: Option<i32>,
        /// The signal that ended it.
        signal: Option<i32>,
        /// The end of its stderr.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        stderr: String,
    },
    /// The command ran past its timeout and was killed.
    TimedOut {
        /// The timeout, ms.
        after_ms: u64,
    },
    /// The command could not be started.
    SpawnFailed {
        /// Why.
        error: String,
    },
    /// The webhook answered 2xx.
    Delivered {
        /// Its status.
        status: u16,
        /// Attempts it took.
        attempts: u32,
    },
    /// The webhook was not delivered.
    Failed {
        /// The last error.
        error: String,
        /// Attempts made.
        attempts: u32,
    },
}

impl Outcome {
    /// Whether the action did what it should (exit 0, or delivered).
    #[must_use]
    pub fn ok(&self) -> bool {
        matches!(
            self,
            Outcome::Exited { code: Some(0), .. } | Outcome::Delivered { .. }
        )
    }

    /// One line for logs and the terminal.
    #[must_use]
    pub fn line(&self) -> String {
        match self {
            Outcome::Exited {
                code: Some(c),
                stderr,
                ..
            } if stderr.is_empty() || *c == 0 => format!("exit {c}"),
            Outcome::Exited {
                code: Some(c),
                stderr,
                ..
            } => format!("exit {c}: {}", stderr.lines().last().unwrap_or_default()),
            Outcome::Exited { signal, .. } => format!("killed by signal {}", signal.unwrap_or(0)),
            Outcome::TimedOut { after_ms } => format!("killed after its {after_ms} ms timeout"),
            Outcome::SpawnFailed { error } => format!("could not start: {error}"),
            Outcome::Delivered { status, attempts } => {
                format!("delivered (HTTP {status}, {attempts} attempt(s))")
            }
            Outcome::Failed { error, attempts } => {
                format!("not delivered after {attempts} attempt(s): {error}")
            }
        }
    }
}

/// One firing of a rule: the window, the values that made it fire, the verdict with its
/// evidence, and (once the action is done) its outcome. This is the webhook's JSON body and
/// `INFERSCOPE_EVIDENCE` (without `outcome`), and an entry of the report's `triggers`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Firing {
    /// The rule.
    pub rule: String,
    /// Start of the window it fired in, Unix ms.
    pub window_start_unix_ms: u64,
    /// Window length, ms.
    pub window_len_ms: u64,
    /// The window's phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The rule's conditions as written.
    pub conditions: Vec<String>,
    /// Each metric the conditions read, in its unit (ms, µs, fraction or number).
    pub values: BTreeMap<String, f64>,
    /// The baseline of each metric a `rises_by`/`falls_by` measured against.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub baselines: BTreeMap<String, f64>,
    /// The server whose window it is (`server` and, in a pod, its Kubernetes names).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerIdentity>,
    /// The window's verdict with its evidence.
    pub verdict: Verdict,
    /// The action: `run PROGRAM` or `webhook URL`.
    pub action: String,
    /// What became of it; `None` while it runs (and in the webhook body).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
}

impl Firing {
    /// The firing as JSON (the webhook body).
    #[must_use]
    pub fn json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// `kv_usage=0.98 ttft_p95_ms=812 (baseline 140); verdict kv_cache`.
    #[must_use]
    pub fn values_line(&self) -> String {
        let mut parts: Vec<String> = self
            .values
            .iter()
            .map(|(k, v)| match self.baselines.get(k) {
                Some(b) => format!(
                    "{k}={} (baseline {})",
                    crate::attribute::fmt_num(*v),
                    crate::attribute::fmt_num(*b)
                ),
                None => format!("{k}={}", crate::attribute::fmt_num(*v)),
            })
            .collect();
        parts.push(format!("verdict {}", self.verdict.cause));
        parts.join(" ")
    }
}

/// Firings per rule so far (the daemon's `/metrics`).
pub struct Counts {
    rules: Vec<(String, AtomicU64)>,
    dropped: AtomicU64,
}

impl Counts {
    fn new(rules: &[Rule]) -> Self {
        Self {
            rules: rules
                .iter()
                .map(|r| (r.name.clone(), AtomicU64::new(0)))
                .collect(),
            dropped: AtomicU64::new(0),
        }
    }

    /// Firings of each rule, in rule order.
    #[must_use]
    pub fn get(&self) -> Vec<(String, u64)> {
        self.rules
            .iter()
            .map(|(n, c)| (n.clone(), c.load(Ordering::Relaxed)))
            .collect()
    }

    /// Firings whose action could not be queued.
    #[must_use]
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// Servers whose episodes and baselines are kept at most; the one seen longest ago is
/// forgotten first.
const MAX_TRACKED: usize = 2 * MAX_SERVERS;

/// One server's rule episodes and metric baselines.
struct Track {
    episodes: Vec<Episode>,
    baseline: Baseline,
    /// When it was last judged (windows judged by the engine).
    seen: u64,
}

/// Evaluates the rules on each server's closed windows.
pub struct Engine {
    rules: Vec<Rule>,
    /// Per server, by its key.
    tracks: BTreeMap<String, Track>,
    /// Windows judged so far.
    judged: u64,
    /// Every metric any rule reads.
    metrics: Vec<Metric>,
    live: Option<LiveLoad>,
}

impl Engine {
    /// An engine for `rules`, no episode under way.
    #[must_use]
    pub fn new(rules: Vec<Rule>) -> Self {
        let mut metrics = Vec::new();
        for m in rules.iter().flat_map(Rule::metrics) {
            if !metrics.contains(&m) {
                metrics.push(m);
            }
        }
        Self {
            rules,
            tracks: BTreeMap::new(),
            judged: 0,
            metrics,
            live: None,
        }
    }

    /// Reads the load generator's finished records into windows that lack load signals
    /// (`stress --explain`, see [`live`]).
    #[must_use]
    pub fn with_live(mut self, live: LiveLoad) -> Self {
        self.live = Some(live);
        self
    }

    /// The rules.
    #[must_use]
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Judges one closed window of `server`; returns the rules that fire now (indices) with
    /// their firings.
    pub fn observe(
        &mut self,
        server: &ServerIdentity,
        w: &Window,
        v: &WindowVerdict,
    ) -> Vec<(usize, Firing)> {
        self.judged += 1;
        if !self.tracks.contains_key(&server.server) && self.tracks.len() >= MAX_TRACKED {
            let oldest = self
                .tracks
                .iter()
                .min_by_key(|(_, t)| t.seen)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.tracks.remove(&k);
            }
        }
        let n = self.rules.len();
        let mut track = self.tracks.remove(&server.server).unwrap_or_else(|| Track {
            episodes: vec![Episode::default(); n],
            baseline: Baseline::default(),
            seen: 0,
        });
        track.seen = self.judged;
        let fired = self.judge(&mut track, server, w, v);
        self.tracks.insert(server.server.clone(), track);
        fired
    }

    fn judge(
        &mut self,
        track: &mut Track,
        server: &ServerIdentity,
        w: &Window,
        v: &WindowVerdict,
    ) -> Vec<(usize, Firing)> {
        let view = match self.live.as_mut() {
            Some(live) => live.fill(w),
            None => w.clone(),
        };
        let values: Vec<(Metric, Option<f64>)> = self
            .metrics
            .iter()
            .map(|m| (*m, m.read(&view, v.index, v.verdict.confidence)))
            .collect();
        let value = |m: Metric| values.iter().find(|(x, _)| *x == m).and_then(|(_, v)| *v);
        let mut fired = Vec::new();
        for (i, rule) in self.rules.iter().enumerate() {
            let held = rule
                .when
                .iter()
                .all(|c| holds(c, value, &track.baseline, &v.verdict));
            if track.episodes[i].step(
                view.start_unix_ms,
                view.len_ms,
                held,
                rule.hold,
                rule.cooldown,
            ) {
                fired.push((i, firing(rule, &track.baseline, server, &view, v, &value)));
            }
        }
        track.baseline.add(view.phase.as_deref(), &values);
        fired
    }
}

/// The firing of `rule` in window `w` of `server`.
fn firing(
    rule: &Rule,
    baseline: &Baseline,
    server: &ServerIdentity,
    w: &Window,
    v: &WindowVerdict,
    value: &dyn Fn(Metric) -> Option<f64>,
) -> Firing {
    let mut values = BTreeMap::new();
    let mut baselines = BTreeMap::new();
    for m in rule.metrics() {
        if let Some(x) = value(m) {
            values.insert(m.name(), x);
        }
    }
    for c in &rule.when {
        if let Condition::Change { metric, .. } = c
            && let Some(b) = baseline.get(*metric)
        {
            baselines.insert(metric.name(), b);
        }
    }
    Firing {
        rule: rule.name.clone(),
        window_start_unix_ms: w.start_unix_ms,
        window_len_ms: w.len_ms,
        phase: w.phase.clone(),
        conditions: rule.when_text.clone(),
        values,
        baselines,
        server: Some(server.clone()),
        verdict: v.verdict.clone(),
        action: match &rule.action {
            Action::Run(argv) => format!("run {}", argv.join(" ")),
            Action::Webhook(url) => format!("webhook {url}"),
        },
        outcome: None,
    }
}

/// Whether condition `c` holds; an absent value (or no baseline yet) does not.
fn holds(
    c: &Condition,
    value: impl Fn(Metric) -> Option<f64>,
    baseline: &Baseline,
    verdict: &Verdict,
) -> bool {
    match *c {
        Condition::Compare {
            metric,
            op,
            value: t,
        } => value(metric).is_some_and(|x| op.holds(x, t)),
        Condition::Change {
            metric,
            rise,
            op,
            by,
        } => {
            let (Some(x), Some(b)) = (value(metric), baseline.get(metric)) else {
                return false;
            };
            let delta = if rise { x - b } else { b - x };
            let need = match by {
                Delta::Absolute(d) => d,
                Delta::Relative(r) => r * b.abs(),
            };
            // A metric that stayed put did not rise by 0 %.
            delta > 0.0 && op.holds(delta, need)
        }
        Condition::Verdict { cause, equal } => (verdict.cause == cause) == equal,
    }
}

/// A running set of triggers.
pub struct Started {
    /// Push it onto [`crate::node::NodeOptions::observers`].
    pub observer: Observer,
    /// The action task: ends once the observer is dropped (the node stopped) and every action
    /// is done, with the firings and their outcomes.
    pub runner: tokio::task::JoinHandle<Vec<Firing>>,
    /// Firings per rule so far.
    pub counts: Arc<Counts>,
}

/// Starts the action task (needs a tokio runtime) and returns the observer that feeds it;
/// webhooks connect within `reach` (checked on the address dialled).
#[must_use]
pub fn start(engine: Engine, on_done: Option<OnDone>, reach: Reach) -> Started {
    let (tx, rx) = mpsc::channel::<Job>(QUEUE);
    let counts = Arc::new(Counts::new(engine.rules()));
    let runner = tokio::spawn(action::serve(rx, on_done, reach));
    let c = Arc::clone(&counts);
    let mut engine = engine;
    let observer: Observer = Box::new(move |s: &ServerIdentity, w: &Window, v: &WindowVerdict| {
        for (i, firing) in engine.observe(s, w, v) {
            c.rules[i].1.fetch_add(1, Ordering::Relaxed);
            let rule = &engine.rules[i];
            let job = Job {
                action: rule.action.clone(),
                timeout: rule.timeout,
                firing,
            };
            if tx.try_send(job).is_err() {
                c.dropped.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(rule = %rule.name, "trigger fired but its action queue is full; action dropped");
            }
        }
    });
    Started {
        observer,
        runner,
        counts,
    }
}

/// Webhooks outside `reach` are refused before anything starts: asked of the guard that every
/// webhook connection goes through ([`crate::dial`]), which checks again on the address it
/// dials.
pub fn check_remote(rules: &[Rule], reach: Reach) -> Result<(), RemoteWebhook> {
    for r in rules {
        if let Action::Webhook(url) = &r.action
            && let Ok(uri) = url.parse::<hyper::Uri>()
            && let Ok((host, port)) = crate::dial::host_port(&uri)
            && let Err(why) = crate::dial::check_blocking(&host, port, reach)
        {
            return Err(RemoteWebhook {
                rule: r.name.clone(),
                url: url.clone(),
                why,
            });
        }
    }
    Ok(())
}

/// A trigger's webhook the loopback guard refuses.
#[derive(Debug, thiserror::Error)]
#[error("trigger `{rule}`: webhook {url}: {why}")]
pub struct RemoteWebhook {
    /// The rule.
    pub rule: String,
    /// The webhook's URL.
    pub url: String,
    /// What the guard said.
    pub why: crate::dial::DialError,
}

/// A triggers file that cannot be used: file, line (when known) and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("{file}{}: {msg}", line.map(|(l, c)| format!(":{l}:{c}")).unwrap_or_default())]
pub struct TriggersError {
    /// The file.
    pub file: String,
    /// 1-based line and column.
    pub line: Option<(usize, usize)>,
    /// What is wrong and what to do.
    pub msg: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    triggers: Vec<WrittenTrigger>,
}

/// Reads and parses a `--triggers` file (YAML: `triggers: [rules...]`).
pub fn load_file(path: &Path) -> Result<Vec<Rule>, TriggersError> {
    let src = std::fs::read_to_string(path).map_err(|e| TriggersError {
        file: path.display().to_string(),
        line: None,
        msg: format!("cannot read the triggers file: {e}"),
    })?;
    parse_yaml(&src, &path.display().to_string())
}

/// Parses a triggers file's text; `file` names it in errors.
pub fn parse_yaml(src: &str, file: &str) -> Result<Vec<Rule>, TriggersError> {
    let raw: File = serde_norway::from_str(src).map_err(|e| {
        let mut msg = e.to_string();
        if let Some(i) = msg.find(" at line ") {
            msg.truncate(i);
        }
        TriggersError {
            file: file.to_owned(),
            line: e.location().map(|l| (l.line(), l.column())),
            msg,
        }
    })?;
    if raw.triggers.is_empty() {
        return Err(TriggersError {
            file: file.to_owned(),
            line: None,
            msg: "`triggers` is empty: add a rule, e.g. `- {name: kv, when: [verdict == kv_cache], for: 60s, webhook: http://127.0.0.1:9000/hook}`".into(),
        });
    }
    rule::parse_rules(raw.triggers).map_err(|e| TriggersError {
        file: file.to_owned(),
        line: line_of(src, &e.needle),
        msg: e.msg,
    })
}

/// Parses and checks a scenario's `triggers:` block; an error points at the scenario's line.
pub fn of_scenario(scenario: &Scenario) -> Result<Vec<Rule>, TriggersError> {
    let origin = &scenario.origin;
    rule::parse_rules(scenario.triggers.clone()).map_err(|e| TriggersError {
        file: origin.file.clone(),
        line: line_of(&origin.text, &e.needle),
        msg: e.msg,
    })
}

#[cfg(test)]
mod tests;

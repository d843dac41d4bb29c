//! A trigger rule as a scenario's `triggers:` block (or a `--triggers` file) writes it: the
//! shape alone. `triggers::rule` parses the conditions and checks the rule; the scenario only
//! carries it, so the load generator never depends on the judgement above it.

use serde::Deserialize;

/// A trigger rule as written, before its conditions are parsed.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WrittenTrigger {
    /// `name:`, labels the rule's metric.
    pub name: String,
    /// `when:`, one condition or a list that must all hold.
    pub when: OneOrMany,
    /// `for:`, how long the conditions must hold.
    #[serde(default, rename = "for")]
    pub hold: Option<String>,
    /// `cooldown:` after a firing.
    #[serde(default)]
    pub cooldown: Option<String>,
    /// `run:`, a command and its arguments.
    #[serde(default)]
    pub run: Option<Vec<String>>,
    /// `webhook:`, a URL to POST to.
    #[serde(default)]
    pub webhook: Option<String>,
    /// `timeout:` of the action.
    #[serde(default)]
    pub timeout: Option<String>,
}

/// One string or a list of them.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    /// `when: kv_usage >= 0.9`
    One(String),
    /// `when: [kv_usage >= 0.9, verdict == kv_cache]`
    Many(Vec<String>),
}

impl OneOrMany {
    /// The strings, one or many.
    #[must_use]
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Self::One(s) => vec![s],
            Self::Many(v) => v,
        }
    }
}

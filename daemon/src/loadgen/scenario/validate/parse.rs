//! Reading and parsing a scenario file: YAML into the raw scenario, its errors at
//! `FILE:LINE:COLUMN` (the offending text when the message quotes it).

use std::{path::Path, sync::Arc};

use crate::loadgen::scenario::{Origin, Scenario, ScenarioError};

impl Scenario {
    /// Reads and parses a scenario file (not yet validated:
    /// [`Plan`](crate::loadgen::scenario::plan::Plan) does that).
    pub fn read(path: &Path) -> Result<Self, ScenarioError> {
        let file = path.display().to_string();
        let src = std::fs::read_to_string(path).map_err(|e| ScenarioError {
            file: file.clone(),
            line: None,
            msg: format!("cannot read scenario: {e}"),
        })?;
        Self::parse_yaml(&src, &file)
    }

    /// Parses YAML text into the raw scenario, not yet checked across fields nor resolved:
    /// [`Plan::compile`](crate::loadgen::scenario::plan::Plan::compile) applies the flags over
    /// it, then validates it.
    pub fn parse_yaml(src: &str, file: &str) -> Result<Self, ScenarioError> {
        let mut s: Self = serde_norway::from_str(src).map_err(|e| {
            let mut msg = e.to_string();
            // serde_norway appends " at line L column C"; we print the location up front.
            if let Some(i) = msg.find(" at line ") {
                msg.truncate(i);
            }
            if msg.contains("missing field `duration`") {
                msg.push_str(" (every phase needs one, e.g. `duration: 60s`)");
            }
            let line = e
                .location()
                .map(|l| refine(src, (l.line(), l.column()), &msg));
            ScenarioError {
                file: file.to_string(),
                line,
                msg,
            }
        })?;
        s.origin = Origin {
            file: file.to_string(),
            text: Arc::from(src),
        };
        Ok(s)
    }
}

/// `serde_norway` places our own validation errors at the start of the enclosing mapping;
/// when the message quotes the offending text, point at that text instead.
fn refine(src: &str, at: (usize, usize), msg: &str) -> (usize, usize) {
    let serde_own = [
        "missing field",
        "unknown field",
        "invalid type",
        "invalid value",
        "did not find",
        "unknown variant",
    ];
    if serde_own.iter().any(|p| msg.contains(p)) {
        return at;
    }
    let quoted = msg
        .split_once(['"', '`'])
        .and_then(|(_, rest)| rest.split_once(['"', '`']))
        .map(|(q, _)| q);
    let Some(q) = quoted.filter(|q| !q.is_empty()) else {
        return at;
    };
    src.lines()
        .enumerate()
        .skip(at.0.saturating_sub(1))
        .take(200)
        .find_map(|(i, l)| l.find(q).map(|c| (i + 1, c + 1)))
        .unwrap_or(at)
}

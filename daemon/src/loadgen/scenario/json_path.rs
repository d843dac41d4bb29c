//! JSON paths into an answer (`$.results[*].id`, `$.ids[0]`, `$.result.points[*].score`): where
//! an adapter finds the ids and scores, with a one-line reason when an answer has none.

use std::fmt::Write as _;

use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
    All,
}

/// A JSON path into an answer: `$.results[*].id`, `$.ids[0]`, `$.result.points[*].score`.
/// When it ends on one array, its elements are the values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonPath {
    text: String,
    steps: Vec<Step>,
}

impl JsonPath {
    /// Parses `$.a.b[0][*].c` (the leading `$` is optional).
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad =
            |why: &str| format!("bad JSON path {text:?}: {why} (write e.g. `$.results[*].id`)");
        let t = text.trim();
        let owned = match t.strip_prefix('$') {
            Some(r) => r.to_string(),
            // `results[*].id` without `$.`.
            None if !t.starts_with(['.', '[']) => format!(".{t}"),
            None => t.to_string(),
        };
        let mut rest = owned.as_str();
        let mut steps = Vec::new();
        while !rest.is_empty() {
            if let Some(r) = rest.strip_prefix('.') {
                let end = r.find(['.', '[']).unwrap_or(r.len());
                let key = &r[..end];
                if key.is_empty() {
                    return Err(bad("empty key"));
                }
                steps.push(Step::Key(key.to_string()));
                rest = &r[end..];
            } else if let Some(r) = rest.strip_prefix('[') {
                let end = r.find(']').ok_or_else(|| bad("`[` without `]`"))?;
                let inner = r[..end].trim();
                steps.push(match inner {
                    "*" => Step::All,
                    q if q.len() >= 2 && (q.starts_with('"') || q.starts_with('\'')) => {
                        Step::Key(q[1..q.len() - 1].to_string())
                    }
                    n => Step::Index(n.parse().map_err(|_| bad("an index is a number or `*`"))?),
                });
                rest = &r[end + 1..];
            } else {
                return Err(bad("expected `.key` or `[..]`"));
            }
        }
        if steps.is_empty() {
            return Err(bad("it names no field"));
        }
        Ok(JsonPath {
            text: text.trim().to_string(),
            steps,
        })
    }

    /// The path as written.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The values at the path; an error names the step that matched nothing.
    pub fn eval<'a>(&self, root: &'a Value) -> Result<Vec<&'a Value>, String> {
        let mut cur = vec![root];
        let mut at = String::from("$");
        for s in &self.steps {
            let mut next = Vec::with_capacity(cur.len());
            for v in cur {
                match (s, v) {
                    (Step::Key(k), Value::Object(m)) => match m.get(k) {
                        Some(x) => next.push(x),
                        None => return Err(format!("`{at}` has no field `{k}`")),
                    },
                    (Step::Index(i), Value::Array(a)) => match a.get(*i) {
                        Some(x) => next.push(x),
                        None => return Err(format!("`{at}` has no element {i}")),
                    },
                    (Step::All, Value::Array(a)) => next.extend(a),
                    (_, other) => {
                        return Err(format!("`{at}` is {}, not {}", kind(other), want(s)));
                    }
                }
            }
            match s {
                Step::Key(k) => {
                    let _ = write!(at, ".{k}");
                }
                Step::Index(i) => {
                    let _ = write!(at, "[{i}]");
                }
                Step::All => at.push_str("[*]"),
            }
            cur = next;
        }
        if let [Value::Array(a)] = cur.as_slice() {
            return Ok(a.iter().collect());
        }
        Ok(cur)
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn want(s: &Step) -> &'static str {
    match s {
        Step::Key(_) => "an object",
        Step::Index(_) | Step::All => "an array",
    }
}

impl<'de> Deserialize<'de> for JsonPath {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        JsonPath::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// Where an answer's ids (and scores) are.
#[derive(Debug, Clone, PartialEq)]
pub struct AnswerPaths {
    /// The ids, best first.
    pub ids: JsonPath,
    /// Their scores or distances (optional).
    pub scores: Option<JsonPath>,
}

impl AnswerPaths {
    /// Built-in paths (from constants known to parse).
    #[must_use]
    pub fn fixed(ids: &str, scores: &str) -> Self {
        AnswerPaths {
            ids: JsonPath::parse(ids).expect("built-in path"),
            scores: Some(JsonPath::parse(scores).expect("built-in path")),
        }
    }

    /// The ids of an answer, as strings (number ids in decimal); a one-line reason when the
    /// answer is not what the paths describe.
    pub fn ids(&self, body: &[u8]) -> Result<Vec<String>, String> {
        let v: Value = serde_json::from_slice(body).map_err(|e| {
            format!(
                "answer is not JSON ({e}): {:?}",
                String::from_utf8_lossy(&body[..body.len().min(120)])
            )
        })?;
        let ids = self
            .ids
            .eval(&v)
            .map_err(|e| format!("ids path `{}` matched nothing: {e}", self.ids.as_str()))?;
        let ids = ids
            .into_iter()
            .map(|id| match id {
                Value::String(s) => Ok(s.clone()),
                Value::Number(n) => Ok(n.to_string()),
                other => Err(format!(
                    "ids path `{}` found {}, not a string or number id",
                    self.ids.as_str(),
                    kind(other)
                )),
            })
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(sp) = &self.scores {
            let scores = sp
                .eval(&v)
                .map_err(|e| format!("scores path `{}` matched nothing: {e}", sp.as_str()))?;
            if scores.len() != ids.len() || scores.iter().any(|s| !s.is_number()) {
                return Err(format!(
                    "scores path `{}` found {} values for {} ids (or a value that is not a number)",
                    sp.as_str(),
                    scores.len(),
                    ids.len()
                ));
            }
        }
        Ok(ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_find_ids_or_say_where_they_stopped() {
        let sim = AnswerPaths::fixed("$.results[*].id", "$.results[*].distance");
        assert_eq!(
            sim.ids(br#"{"results":[{"id":1,"distance":0.1},{"id":"b","distance":0.2}]}"#)
                .unwrap(),
            ["1", "b"]
        );
        assert!(sim.ids(br#"{"results":[]}"#).unwrap().is_empty());
        let e = sim.ids(br#"{"hits":[]}"#).unwrap_err();
        assert!(e.contains("`$` has no field `results`"), "{e}");
        let e = sim.ids(b"<html>").unwrap_err();
        assert!(e.contains("not JSON"), "{e}");
        let e = sim.ids(br#"{"results":[{"id":1}]}"#).unwrap_err();
        assert!(e.contains("scores path"), "{e}");
        let chroma = AnswerPaths::fixed("$.ids[0]", "$.distances[0]");
        assert_eq!(
            chroma
                .ids(br#"{"ids":[["3","4"]],"distances":[[0.1,0.2]]}"#)
                .unwrap(),
            ["3", "4"]
        );
        let e = chroma.ids(br#"{"ids":"x","distances":[]}"#).unwrap_err();
        assert!(e.contains("is a string, not an array"), "{e}");
        assert_eq!(
            JsonPath::parse("results[*]['id']").unwrap().steps,
            JsonPath::parse("$.results[*].id").unwrap().steps
        );
        assert!(JsonPath::parse("$.a[x]").is_err());
        assert!(JsonPath::parse("$").is_err());
    }
}

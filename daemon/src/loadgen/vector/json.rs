//! The generic `api: json` adapter: a request body template with `${vector}`, `${top_k}`,
//! `${ef_search}` (and `${text}`) placeholders, and JSON paths to the answer's ids and scores,
//! so that any HTTP vector API can be driven without code. The built-in adapters (sim,
//! Chroma, Qdrant) read their answers through the same paths.

use std::fmt::Write as _;

use serde::Deserialize;
use serde_json::Value;

/// A placeholder a template may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Var {
    /// The query vector, a JSON array of numbers.
    Vector,
    /// `top_k`, a number.
    TopK,
    /// `ef_search`, a number (`null` when the phase sets none).
    EfSearch,
    /// The query text (`request.text`), a string.
    Text,
    /// Insert template: the batch's ids as strings (`["0","1",..]`).
    Ids,
    /// Insert template: the batch's ids as numbers (`[0,1,..]`).
    NumIds,
    /// Insert template: the batch's vectors, an array of arrays.
    Vectors,
}

impl Var {
    fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "vector" => Var::Vector,
            "top_k" => Var::TopK,
            "ef_search" => Var::EfSearch,
            "text" => Var::Text,
            "ids" => Var::Ids,
            "num_ids" => Var::NumIds,
            "vectors" => Var::Vectors,
            _ => return None,
        })
    }
}

/// Placeholders of a search body.
pub const SEARCH_VARS: &[Var] = &[Var::Vector, Var::TopK, Var::EfSearch, Var::Text];
/// Placeholders of an insert body.
pub const INSERT_VARS: &[Var] = &[Var::Ids, Var::NumIds, Var::Vectors];

#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Lit(String),
    /// A whole JSON value (`"${vector}"` as a string leaf).
    Raw(Var),
    /// Inside a JSON string (`"k=${top_k}"`): the value's text, escaped.
    InStr(Var),
}

/// A compiled body template; rendering is a concatenation (no JSON tree per request).
#[derive(Debug, Clone, PartialEq)]
pub struct BodyTemplate {
    pieces: Vec<Piece>,
    uses: Vec<Var>,
}

/// The values placeholders render to.
#[derive(Debug, Default, Clone, Copy)]
pub struct Vars<'a> {
    /// The query vector.
    pub vector: Option<&'a [f32]>,
    /// `top_k`.
    pub top_k: usize,
    /// `ef_search`.
    pub ef_search: Option<u32>,
    /// The query text.
    pub text: Option<&'a str>,
    /// First id of an insert batch.
    pub first_id: usize,
    /// The vectors of an insert batch (ids `first_id..`), `dims` numbers each.
    pub vectors: Option<&'a [f32]>,
    /// Dimensions of `vectors`.
    pub dims: usize,
}

impl BodyTemplate {
    /// Compiles `v`; `allowed` are the placeholders this template may use.
    pub fn compile(v: &Value, allowed: &[Var]) -> Result<Self, String> {
        let mut t = BodyTemplate {
            pieces: Vec::new(),
            uses: Vec::new(),
        };
        t.walk(v, allowed)?;
        Ok(t)
    }

    /// Whether the template uses `var`.
    #[must_use]
    pub fn uses(&self, var: Var) -> bool {
        self.uses.contains(&var)
    }

    fn lit(&mut self, s: &str) {
        if let Some(Piece::Lit(l)) = self.pieces.last_mut() {
            l.push_str(s);
        } else {
            self.pieces.push(Piece::Lit(s.to_string()));
        }
    }

    fn walk(&mut self, v: &Value, allowed: &[Var]) -> Result<(), String> {
        match v {
            Value::String(s) if s.contains("${") => self.string(s, allowed),
            Value::Array(a) => {
                self.lit("[");
                for (i, x) in a.iter().enumerate() {
                    if i > 0 {
                        self.lit(",");
                    }
                    self.walk(x, allowed)?;
                }
                self.lit("]");
                Ok(())
            }
            Value::Object(m) => {
                self.lit("{");
                for (i, (k, x)) in m.iter().enumerate() {
                    if i > 0 {
                        self.lit(",");
                    }
                    self.lit(&Value::String(k.clone()).to_string());
                    self.lit(":");
                    self.walk(x, allowed)?;
                }
                self.lit("}");
                Ok(())
            }
            other => {
                self.lit(&other.to_string());
                Ok(())
            }
        }
    }

    fn var(&mut self, name: &str, allowed: &[Var]) -> Result<Var, String> {
        let names = allowed
            .iter()
            .map(|v| format!("${{{}}}", var_name(*v)))
            .collect::<Vec<_>>()
            .join(", ");
        let var = Var::parse(name)
            .filter(|v| allowed.contains(v))
            .ok_or_else(|| format!("unknown placeholder `${{{name}}}`: use {names}"))?;
        if !self.uses.contains(&var) {
            self.uses.push(var);
        }
        Ok(var)
    }

    fn string(&mut self, s: &str, allowed: &[Var]) -> Result<(), String> {
        if let Some(name) = s.strip_prefix("${").and_then(|r| r.strip_suffix('}'))
            && !name.contains(['{', '}', '$'])
        {
            let var = self.var(name, allowed)?;
            self.pieces.push(Piece::Raw(var));
            return Ok(());
        }
        self.lit("\"");
        let mut rest = s;
        while let Some(at) = rest.find("${") {
            self.lit(escaped(&rest[..at]).as_str());
            let after = &rest[at + 2..];
            let end = after
                .find('}')
                .ok_or_else(|| format!("unclosed placeholder in {s:?}: write e.g. `${{top_k}}`"))?;
            let var = self.var(&after[..end], allowed)?;
            self.pieces.push(Piece::InStr(var));
            rest = &after[end + 1..];
        }
        self.lit(&escaped(rest));
        self.lit("\"");
        Ok(())
    }

    /// Renders the body.
    #[must_use]
    pub fn render(&self, vars: &Vars<'_>) -> String {
        let mut out = String::with_capacity(64 + vars.vector.map_or(0, |v| v.len() * 12));
        for p in &self.pieces {
            match p {
                Piece::Lit(s) => out.push_str(s),
                Piece::Raw(v) => value(&mut out, *v, vars),
                Piece::InStr(v) => {
                    let mut s = String::new();
                    value(&mut s, *v, vars);
                    // A string placeholder inside a string: its own text, not its quotes.
                    let s = match serde_json::from_str::<Value>(&s) {
                        Ok(Value::String(t)) => t,
                        _ => s,
                    };
                    out.push_str(&escaped(&s));
                }
            }
        }
        out
    }
}

fn var_name(v: Var) -> &'static str {
    match v {
        Var::Vector => "vector",
        Var::TopK => "top_k",
        Var::EfSearch => "ef_search",
        Var::Text => "text",
        Var::Ids => "ids",
        Var::NumIds => "num_ids",
        Var::Vectors => "vectors",
    }
}

/// `s` escaped for the inside of a JSON string.
fn escaped(s: &str) -> String {
    let q = Value::String(s.to_string()).to_string();
    q[1..q.len() - 1].to_string()
}

/// Writes a float vector as a JSON array.
pub fn write_vector(out: &mut String, v: &[f32]) {
    out.push('[');
    for (i, x) in v.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        // Display is the shortest text that reads back to the same f32, never an exponent.
        let _ = write!(out, "{x}");
    }
    out.push(']');
}

fn value(out: &mut String, var: Var, v: &Vars<'_>) {
    match var {
        Var::Vector => write_vector(out, v.vector.unwrap_or_default()),
        Var::TopK => {
            let _ = write!(out, "{}", v.top_k);
        }
        Var::EfSearch => match v.ef_search {
            Some(ef) => {
                let _ = write!(out, "{ef}");
            }
            None => out.push_str("null"),
        },
        Var::Text => out.push_str(&Value::String(v.text.unwrap_or_default().into()).to_string()),
        Var::Ids | Var::NumIds => {
            let n = v.vectors.map_or(0, |x| x.len() / v.dims.max(1));
            out.push('[');
            for i in 0..n {
                if i > 0 {
                    out.push(',');
                }
                let id = v.first_id + i;
                if var == Var::Ids {
                    let _ = write!(out, "\"{id}\"");
                } else {
                    let _ = write!(out, "{id}");
                }
            }
            out.push(']');
        }
        Var::Vectors => {
            out.push('[');
            for (i, row) in v
                .vectors
                .unwrap_or_default()
                .chunks_exact(v.dims.max(1))
                .enumerate()
            {
                if i > 0 {
                    out.push(',');
                }
                write_vector(out, row);
            }
            out.push(']');
        }
    }
}

impl TryFrom<Value> for BodyTemplate {
    type Error = String;
    fn try_from(v: Value) -> Result<Self, String> {
        BodyTemplate::compile(&v, SEARCH_VARS)
    }
}

impl<'de> Deserialize<'de> for BodyTemplate {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        BodyTemplate::compile(&v, SEARCH_VARS).map_err(serde::de::Error::custom)
    }
}

/// A template for insert bodies (`${ids}`, `${num_ids}`, `${vectors}`).
#[derive(Debug, Clone, PartialEq)]
pub struct InsertTemplate(pub BodyTemplate);

impl<'de> Deserialize<'de> for InsertTemplate {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        let t = BodyTemplate::compile(&v, INSERT_VARS).map_err(serde::de::Error::custom)?;
        if !t.uses(Var::Vectors) {
            return Err(serde::de::Error::custom(
                "an insert body needs `${vectors}` (and `${ids}` or `${num_ids}`)",
            ));
        }
        Ok(InsertTemplate(t))
    }
}

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
    use serde_json::json;

    #[test]
    fn templates_render_typed_and_inline_placeholders() {
        let t = BodyTemplate::compile(
            &json!({"q": "${vector}", "k": "${top_k}", "ef": "${ef_search}", "s": "top ${top_k} of \"${text}\"", "fixed": [1, "a"]}),
            SEARCH_VARS,
        )
        .unwrap();
        let v = [0.5f32, -1.0];
        let out = t.render(&Vars {
            vector: Some(&v),
            top_k: 3,
            ef_search: None,
            text: Some("a\"b"),
            ..Vars::default()
        });
        let back: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            back,
            json!({"q": [0.5, -1], "k": 3, "ef": null, "s": "top 3 of \"a\"b\"", "fixed": [1, "a"]})
        );
        assert!(t.uses(Var::Vector) && !t.uses(Var::Ids));
    }

    #[test]
    fn bad_templates_say_what_to_write() {
        let e = BodyTemplate::compile(&json!({"q": "${vec}"}), SEARCH_VARS).unwrap_err();
        assert!(
            e.contains("unknown placeholder `${vec}`") && e.contains("${vector}"),
            "{e}"
        );
        let e = BodyTemplate::compile(&json!({"q": "x ${top_k"}), SEARCH_VARS).unwrap_err();
        assert!(e.contains("unclosed"), "{e}");
        assert!(BodyTemplate::compile(&json!({"q": "${ids}"}), SEARCH_VARS).is_err());
    }

    #[test]
    fn insert_templates() {
        let t = BodyTemplate::compile(
            &json!({"ids": "${ids}", "n": "${num_ids}", "embeddings": "${vectors}"}),
            INSERT_VARS,
        )
        .unwrap();
        let flat = [1.0f32, 2.0, 3.0, 4.0];
        let out = t.render(&Vars {
            first_id: 7,
            vectors: Some(&flat),
            dims: 2,
            ..Vars::default()
        });
        let back: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            back,
            json!({"ids": ["7", "8"], "n": [7, 8], "embeddings": [[1, 2], [3, 4]]})
        );
    }

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

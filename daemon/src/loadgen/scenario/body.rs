//! The generic `api: json` adapter's body templates: `${vector}`, `${top_k}`, `${ef_search}`
//! (and `${text}`) placeholders in a search body, `${ids}`/`${vectors}` in an insert body. With
//! the JSON paths of `path.rs` (where the answer's ids and scores are) any HTTP vector API can
//! be driven without code.

use std::fmt::Write as _;

use serde::Deserialize;
use serde_json::Value;

pub use crate::loadgen::scenario::json_path::{AnswerPaths, JsonPath};

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
}

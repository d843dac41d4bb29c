//! Request templates: strings with `${...}` placeholders, compiled once, rendered per request.
//!
//! Placeholders:
//! - `${random_int(a,b)}`: uniform integer in `[a, b]`;
//! - `${random_float(a,b)}`: uniform float in `[a, b)`;
//! - `${choice(x, "y z", 3)}`: one of the arguments, uniformly (quotes keep commas/spaces);
//! - `${dataset.FIELD}`: a field of the dataset row drawn for this request
//!   (`prompt`, `output_tokens`, or any key of a JSONL row);
//! - `${seq}`: the request's sequence number.
//!
//! `$${` writes a literal `${`. A JSON string that is exactly one numeric placeholder
//! renders as a JSON number, so `temperature: "${random_float(0.3,0.8)}"` sends a number;
//! one that is exactly `${dataset.FIELD}` renders as the row's value with its JSON type, so
//! `temperature: "${dataset.temperature}"` sends the row's number.

use rand::{Rng, seq::IndexedRandom};
use serde_json::Value;

use crate::loadgen::scenario::dataset::Row;

/// A template that could not be compiled.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TemplateError {
    /// `${` without a closing `}`.
    #[error("unclosed `${{` in template {0:?}")]
    Unclosed(String),
    /// Unknown function or malformed arguments.
    #[error("bad placeholder `${{{0}}}`: {1}")]
    Bad(String, String),
}

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Lit(String),
    Int(i64, i64),
    Float(f64, f64),
    Choice(Vec<String>),
    Field(String),
    Seq,
}

/// A compiled string template.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    parts: Vec<Part>,
}

/// What a render needs besides the template.
pub struct Ctx<'a, R: Rng> {
    /// Random source (seeded per run for reproducibility).
    pub rng: &'a mut R,
    /// The dataset row drawn for this request, if the phase has a dataset.
    pub row: Option<&'a Row>,
    /// Request sequence number.
    pub seq: u64,
}

impl Template {
    /// Compiles `src`.
    pub fn parse(src: &str) -> Result<Self, TemplateError> {
        let mut parts = Vec::new();
        let mut lit = String::new();
        let mut rest = src;
        while let Some(pos) = rest.find("${") {
            if rest[..pos].ends_with('$') {
                lit.push_str(&rest[..pos - 1]);
                lit.push_str("${");
                rest = &rest[pos + 2..];
                continue;
            }
            lit.push_str(&rest[..pos]);
            let end = rest[pos..]
                .find('}')
                .ok_or_else(|| TemplateError::Unclosed(src.to_string()))?;
            let inner = rest[pos + 2..pos + end].trim();
            if !lit.is_empty() {
                parts.push(Part::Lit(std::mem::take(&mut lit)));
            }
            parts.push(parse_placeholder(inner)?);
            rest = &rest[pos + end + 1..];
        }
        lit.push_str(rest);
        if !lit.is_empty() {
            parts.push(Part::Lit(lit));
        }
        Ok(Template { parts })
    }

    /// The text, when the template has no placeholder.
    #[must_use]
    pub fn literal(&self) -> Option<&str> {
        match self.parts.as_slice() {
            [] => Some(""),
            [Part::Lit(s)] => Some(s),
            _ => None,
        }
    }

    /// Whether the template uses `${dataset.*}`.
    #[must_use]
    pub fn uses_dataset(&self) -> bool {
        self.parts.iter().any(|p| matches!(p, Part::Field(_)))
    }

    /// Renders to a string.
    pub fn render<R: Rng>(&self, ctx: &mut Ctx<'_, R>) -> String {
        let mut out = String::new();
        for p in &self.parts {
            render_part(p, ctx, &mut out);
        }
        out
    }

    /// Renders to JSON: a lone numeric placeholder gives a number, a lone `${dataset.FIELD}`
    /// the row's value with its JSON type, anything else a string.
    pub fn render_json<R: Rng>(&self, ctx: &mut Ctx<'_, R>) -> Value {
        if let [Part::Field(name)] = self.parts.as_slice()
            && let Some(v) = ctx.row.and_then(|r| r.value(name))
        {
            return v;
        }
        let s = self.render(ctx);
        if let [Part::Int(..) | Part::Float(..) | Part::Seq] = self.parts.as_slice()
            && let Ok(v) = serde_json::from_str::<serde_json::Number>(&s)
        {
            return Value::Number(v);
        }
        Value::String(s)
    }
}

fn render_part<R: Rng>(p: &Part, ctx: &mut Ctx<'_, R>, out: &mut String) {
    use std::fmt::Write as _;
    match p {
        Part::Lit(s) => out.push_str(s),
        Part::Int(a, b) => {
            let _ = write!(out, "{}", ctx.rng.random_range(*a..=*b));
        }
        Part::Float(a, b) => {
            let v = if a < b {
                ctx.rng.random_range(*a..*b)
            } else {
                *a
            };
            let _ = write!(out, "{v:.4}");
        }
        Part::Choice(c) => out.push_str(c.choose(ctx.rng).map_or("", String::as_str)),
        Part::Field(f) => {
            if let Some(row) = ctx.row {
                out.push_str(&row.field(f));
            }
        }
        Part::Seq => {
            let _ = write!(out, "{}", ctx.seq);
        }
    }
}

fn parse_placeholder(inner: &str) -> Result<Part, TemplateError> {
    let bad = |why: &str| TemplateError::Bad(inner.to_string(), why.to_string());
    if let Some(field) = inner.strip_prefix("dataset.") {
        if field.is_empty() || !field.chars().all(|c| c.is_alphanumeric() || c == '_') {
            return Err(bad("expected dataset.FIELD"));
        }
        return Ok(Part::Field(field.to_string()));
    }
    if inner == "seq" {
        return Ok(Part::Seq);
    }
    let (name, args) = inner
        .strip_suffix(')')
        .and_then(|s| s.split_once('('))
        .ok_or_else(|| {
            bad("expected random_int(a,b), random_float(a,b), choice(..), dataset.FIELD or seq")
        })?;
    let args = split_args(args);
    match name.trim() {
        "random_int" => match args.as_slice() {
            [a, b] => {
                let (a, b) = (a.parse::<i64>(), b.parse::<i64>());
                match (a, b) {
                    (Ok(a), Ok(b)) if a <= b => Ok(Part::Int(a, b)),
                    _ => Err(bad("random_int needs two integers a <= b")),
                }
            }
            _ => Err(bad("random_int takes two arguments")),
        },
        "random_float" => match args.as_slice() {
            [a, b] => match (a.parse::<f64>(), b.parse::<f64>()) {
                // The width must be finite too: `(-1e308, 1e308)` overflows when sampled.
                (Ok(a), Ok(b)) if a <= b && (b - a).is_finite() => Ok(Part::Float(a, b)),
                _ => Err(bad(
                    "random_float needs two finite numbers a <= b whose difference is finite",
                )),
            },
            _ => Err(bad("random_float takes two arguments")),
        },
        "choice" if !args.is_empty() => Ok(Part::Choice(args)),
        "choice" => Err(bad("choice needs at least one argument")),
        other => Err(bad(&format!("unknown function `{other}`"))),
    }
}

/// Splits `a, "b, c", 'd'` into arguments, honouring double and single quotes.
fn split_args(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut quoted = false;
    for c in s.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (None, '"' | '\'') => {
                quote = Some(c);
                quoted = true;
            }
            (None, ',') => {
                out.push(finish_arg(&mut cur, quoted));
                quoted = false;
            }
            _ => cur.push(c),
        }
    }
    if !cur.trim().is_empty() || quoted || !out.is_empty() {
        out.push(finish_arg(&mut cur, quoted));
    }
    out
}

fn finish_arg(cur: &mut String, quoted: bool) -> String {
    let s = std::mem::take(cur);
    if quoted { s } else { s.trim().to_string() }
}

/// A JSON value whose strings are templates.
#[derive(Debug, Clone, PartialEq)]
pub enum JsonTemplate {
    /// A non-string leaf, sent as is.
    Leaf(Value),
    /// A templated string.
    Str(Template),
    /// An array.
    Array(Vec<JsonTemplate>),
    /// An object (order kept).
    Object(Vec<(String, JsonTemplate)>),
}

impl JsonTemplate {
    /// Compiles every string inside `v`.
    pub fn compile(v: &Value) -> Result<Self, TemplateError> {
        Ok(match v {
            Value::String(s) => JsonTemplate::Str(Template::parse(s)?),
            Value::Array(a) => {
                JsonTemplate::Array(a.iter().map(Self::compile).collect::<Result<_, _>>()?)
            }
            Value::Object(o) => JsonTemplate::Object(
                o.iter()
                    .map(|(k, v)| Ok((k.clone(), Self::compile(v)?)))
                    .collect::<Result<_, TemplateError>>()?,
            ),
            other => JsonTemplate::Leaf(other.clone()),
        })
    }

    /// Renders a fresh JSON value.
    pub fn render<R: Rng>(&self, ctx: &mut Ctx<'_, R>) -> Value {
        match self {
            JsonTemplate::Leaf(v) => v.clone(),
            JsonTemplate::Str(t) => t.render_json(ctx),
            JsonTemplate::Array(a) => Value::Array(a.iter().map(|t| t.render(ctx)).collect()),
            JsonTemplate::Object(o) => {
                Value::Object(o.iter().map(|(k, t)| (k.clone(), t.render(ctx))).collect())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{SeedableRng, rngs::SmallRng};

    fn render(src: &str, row: Option<&Row>) -> String {
        let mut rng = SmallRng::seed_from_u64(1);
        let t = Template::parse(src).unwrap();
        t.render(&mut Ctx {
            rng: &mut rng,
            row,
            seq: 42,
        })
    }

    #[test]
    fn random_int_stays_in_range() {
        for _ in 0..100 {
            let v: i64 = render("${random_int(1000,9999)}", None).parse().unwrap();
            assert!((1000..=9999).contains(&v));
        }
    }

    #[test]
    fn choice_literals_dataset_and_seq() {
        let row = Row::from_prompt("hello world".into(), Some(7));
        let s = render(
            "[${choice(\"a, b\")}] ${dataset.prompt} #${seq} $${x}",
            Some(&row),
        );
        assert_eq!(s, "[a, b] hello world #42 ${x}");
        assert_eq!(render("${dataset.output_tokens}", Some(&row)), "7");
        let c = render("${choice(red, green)}", None);
        assert!(c == "red" || c == "green");
    }

    #[test]
    fn numeric_placeholder_renders_as_number() {
        let mut rng = SmallRng::seed_from_u64(1);
        let t = JsonTemplate::compile(&serde_json::json!({
            "temperature": "${random_float(0.3,0.8)}", "n": "${random_int(1,1)}", "s": "x${seq}"
        }))
        .unwrap();
        let v = t.render(&mut Ctx {
            rng: &mut rng,
            row: None,
            seq: 3,
        });
        let temp = v["temperature"].as_f64().unwrap();
        assert!((0.3..0.8).contains(&temp));
        assert_eq!(v["n"], 1);
        assert_eq!(v["s"], "x3");
    }

    #[test]
    fn a_lone_dataset_field_keeps_its_json_type() {
        use crate::loadgen::{scenario::dataset::Dataset, scenario::files::Files};
        let dir = tempfile::tempdir().unwrap();
        let line = r#"{"prompt":"p","temperature":0.42,"tools":[{"type":"function"}]}"#;
        std::fs::write(dir.path().join("d.jsonl"), line).unwrap();
        let spec = serde_norway::from_str("path: d.jsonl").unwrap();
        let mut rng = SmallRng::seed_from_u64(1);
        let ds = Dataset::load(&spec, Files::Relative(dir.path()), &mut rng).unwrap();
        let row = ds.pick(&mut rng).clone();
        let t = JsonTemplate::compile(&serde_json::json!({
            "temperature": "${dataset.temperature}", "tools": "${dataset.tools}",
            "s": "t=${dataset.temperature}", "missing": "${dataset.nope}"
        }))
        .unwrap();
        let v = t.render(&mut Ctx {
            rng: &mut rng,
            row: Some(&row),
            seq: 0,
        });
        assert_eq!(v["temperature"], 0.42);
        assert_eq!(v["tools"][0]["type"], "function");
        assert_eq!(v["s"], "t=0.42");
        assert_eq!(v["missing"], "");
    }

    #[test]
    fn errors_say_what_is_wrong() {
        assert!(matches!(
            Template::parse("a ${random_int(1,2)"),
            Err(TemplateError::Unclosed(_))
        ));
        let e = Template::parse("${random_int(5,1)}")
            .unwrap_err()
            .to_string();
        assert!(e.contains("a <= b"), "{e}");
        let e = Template::parse("${nope(1)}").unwrap_err().to_string();
        assert!(e.contains("unknown function `nope`"), "{e}");
        assert!(Template::parse("${choice()}").is_err());
        for bad in [
            "${random_float(-1e308,1e308)}",
            "${random_float(0,inf)}",
            "${random_float(NaN,1)}",
        ] {
            let e = Template::parse(bad).unwrap_err().to_string();
            assert!(e.contains("finite"), "{bad}: {e}");
        }
        let wide = render("${random_float(-1e307,1e307)}", None);
        assert!(wide.parse::<f64>().is_ok_and(f64::is_finite), "{wide}");
    }
}

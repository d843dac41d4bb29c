//! The custom field parsers the schema uses: fractions (`0.1` or `10%`), templates, JSON
//! templates and SLOs.

use serde::{Deserialize, Deserializer, de::Error as _};

use crate::loadgen::scenario::template::{JsonTemplate, Template};
use crate::measure::slo::Slo;

#[derive(Deserialize)]
#[serde(untagged)]
enum RatioRepr {
    Num(f64),
    Text(String),
}

pub(crate) fn de_ratio<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let repr = RatioRepr::deserialize(d)?;
    let text = match &repr {
        RatioRepr::Num(v) => v.to_string(),
        RatioRepr::Text(t) => t.clone(),
    };
    let v = match repr {
        RatioRepr::Num(v) => v,
        RatioRepr::Text(t) => t
            .trim()
            .strip_suffix('%')
            .and_then(|p| p.trim().parse::<f64>().ok())
            .map(|p| p / 100.0)
            .ok_or_else(|| D::Error::custom(format!("bad fraction {t:?}: write 0.1 or 10%")))?,
    };
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(D::Error::custom(format!(
            "fraction `{text}` is not within 0..1 (0%..100%)"
        )))
    }
}

pub(crate) fn de_opt_ratio<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    de_ratio(d).map(Some)
}

pub(crate) fn de_opt_template<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Template>, D::Error> {
    let s = String::deserialize(d)?;
    Template::parse(&s).map(Some).map_err(D::Error::custom)
}

pub(crate) fn de_opt_json_template<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<JsonTemplate>, D::Error> {
    let v = serde_json::Value::deserialize(d)?;
    JsonTemplate::compile(&v)
        .map(Some)
        .map_err(D::Error::custom)
}

pub(crate) fn de_slos<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Slo>, D::Error> {
    Vec::<String>::deserialize(d)?
        .iter()
        .map(|s| Slo::parse(s).map_err(D::Error::custom))
        .collect()
}

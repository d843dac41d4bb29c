//! The syntax of one exposition line: a sample's name, labels (with their
//! escapes), value and timestamp, plus the small lexical helpers.

use super::{LineErrorKind, Sample};

/// Parses `name{labels} value [timestamp]`.
pub(super) fn parse_sample(line: &str) -> Result<Sample, LineErrorKind> {
    let name_end = line
        .find(|c: char| !is_name_char(c, true))
        .unwrap_or(line.len());
    let name = &line[..name_end];
    if !is_metric_name(name) {
        let bad = line.split([' ', '\t', '{']).next().unwrap_or(line);
        return Err(LineErrorKind::InvalidMetricName(clip(bad)));
    }
    let mut rest = &line[name_end..];
    if !rest.is_empty() && !rest.starts_with([' ', '\t', '{']) {
        return Err(LineErrorKind::InvalidMetricName(clip(
            line.split([' ', '\t']).next().unwrap_or(line),
        )));
    }
    let mut labels = Vec::new();
    // Go's parser allows blanks between the name and `{`.
    if let Some(after) = rest.trim_start_matches([' ', '\t']).strip_prefix('{') {
        rest = parse_labels(after, &mut labels)?;
    }
    let (value_text, rest) = split_word(rest.trim_start_matches([' ', '\t']));
    if value_text.is_empty() {
        return Err(LineErrorKind::MissingValue);
    }
    let value =
        parse_float(value_text).ok_or_else(|| LineErrorKind::InvalidValue(clip(value_text)))?;
    let (ts_text, trailing) = split_word(rest);
    let timestamp_ms = if ts_text.is_empty() {
        None
    } else {
        Some(
            ts_text
                .parse::<i64>()
                .map_err(|_| LineErrorKind::InvalidTimestamp(clip(ts_text)))?,
        )
    };
    if !trailing.trim().is_empty() {
        return Err(LineErrorKind::TrailingText(clip(trailing.trim())));
    }
    Ok(Sample {
        name: name.to_owned(),
        labels,
        value,
        timestamp_ms,
    })
}

/// Parses label pairs after `{`; returns the text after the closing `}`.
fn parse_labels<'a>(
    mut s: &'a str,
    labels: &mut Vec<(String, String)>,
) -> Result<&'a str, LineErrorKind> {
    loop {
        s = s.trim_start_matches([' ', '\t']);
        if let Some(after) = s.strip_prefix('}') {
            return Ok(after);
        }
        if s.is_empty() {
            return Err(LineErrorKind::UnterminatedLabels);
        }
        let name_end = s.find(|c: char| !is_name_char(c, false)).unwrap_or(s.len());
        let name = &s[..name_end];
        if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(LineErrorKind::InvalidLabelName(clip(
                s.split(['=', ',', '}']).next().unwrap_or(s),
            )));
        }
        s = s[name_end..].trim_start_matches([' ', '\t']);
        s = s.strip_prefix('=').ok_or_else(|| bad_syntax("'='", s))?;
        s = s.trim_start_matches([' ', '\t']);
        s = s.strip_prefix('"').ok_or_else(|| bad_syntax("'\"'", s))?;
        let (value, after) = parse_label_value(s)?;
        if labels.iter().any(|(k, _)| k == name) {
            return Err(LineErrorKind::DuplicateLabel(clip(name)));
        }
        labels.push((name.to_owned(), value));
        s = after.trim_start_matches([' ', '\t']);
        if let Some(after) = s.strip_prefix(',') {
            s = after;
        } else if !s.starts_with('}') {
            return Err(if s.is_empty() {
                LineErrorKind::UnterminatedLabels
            } else {
                bad_syntax("',' or '}'", s)
            });
        }
    }
}

/// Unescapes a quoted label value (opening quote already consumed).
fn parse_label_value(s: &str) -> Result<(String, &str), LineErrorKind> {
    let mut value = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Ok((value, &s[i + 1..])),
            '\\' => match chars.next() {
                Some((_, '\\')) => value.push('\\'),
                Some((_, '"')) => value.push('"'),
                Some((_, 'n')) => value.push('\n'),
                Some((_, other)) => return Err(LineErrorKind::InvalidEscape(other)),
                None => return Err(LineErrorKind::UnterminatedLabels),
            },
            _ => value.push(c),
        }
    }
    Err(LineErrorKind::UnterminatedLabels)
}

/// HELP text escapes only `\\` and `\n`; anything else is kept verbatim.
pub(super) fn unescape_help(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('n') => out.push('\n'),
                Some('\\') | None => out.push('\\'),
                Some(other) => {
                    out.push('\\');
                    out.push(other);
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Parses a sample value or a `le`/`quantile` bound like Go's `ParseFloat`.
pub(crate) fn parse_float(s: &str) -> Option<f64> {
    // Rust also accepts "infinity" and "inf"; the format spells +Inf/-Inf/NaN,
    // and being lenient about case costs nothing.
    s.parse::<f64>().ok()
}

pub(super) fn split_word(s: &str) -> (&str, &str) {
    let s = s.trim_start_matches([' ', '\t']);
    let end = s.find([' ', '\t']).unwrap_or(s.len());
    (&s[..end], s[end..].trim_start_matches([' ', '\t']))
}

fn is_name_char(c: char, colon: bool) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || (colon && c == ':')
}

pub(super) fn is_metric_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| is_name_char(c, true))
}

fn bad_syntax(expected: &'static str, found: &str) -> LineErrorKind {
    LineErrorKind::BadLabelSyntax {
        expected,
        found: clip(found),
    }
}

/// Bounds the text quoted in an error so a huge bad line does not make a huge message.
pub(super) fn clip(s: &str) -> String {
    const MAX: usize = 40;
    match s.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

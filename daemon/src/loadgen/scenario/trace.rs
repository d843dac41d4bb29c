//! Trace files of `load: {shape: trace}`: when each request arrives, and with `format:
//! mooncake` what each one sends.
//!
//! Two formats, one row per line:
//!
//! - `timestamps` (the default): a number (seconds), or a JSON object with `timestamp`
//!   (seconds) or `timestamp_ms`. Only the arrivals are replayed; the phase's `request:` says
//!   what is sent.
//! - `mooncake`: the layout of the Mooncake traces (`FAST25-release/traces` of
//!   github.com/kvcache-ai/Mooncake, replayed the same way by NVIDIA `AIPerf`):
//!   `{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47]}`,
//!   `timestamp` in **milliseconds**, `hash_ids` the ids of the prompt's blocks of
//!   `block_size` tokens (512 in the published traces). Row i is sent by arrival i
//!   (`replay.rs` builds its prompt).
//!
//! Either way the rows are sorted by time and replayed relative to the first one, `window`
//! keeps a span of the trace's own clock and `speed` divides its gaps.

use std::time::Duration;

use serde::Deserialize;

use crate::loadgen::scenario::{
    replay::{Replay, TraceFormat, TraceRow},
    words::MAX_SYNTHETIC_PROMPT_WORDS,
};

/// Tokens per hash block of the published Mooncake traces.
pub const MOONCAKE_BLOCK_SIZE: u32 = 512;
/// Largest `output_length` of a row (sent as `max_tokens`).
pub const MAX_OUTPUT_LENGTH: u64 = 1_000_000;

/// A span of the trace's own clock, measured from its first row: `[from, until)`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Window {
    /// Rows before this are skipped; the first row at or after it is sent at the phase's
    /// start plus its distance from `from`.
    pub from: Duration,
    /// Rows at or after this are not sent; `None`: to the trace's end.
    pub until: Option<Duration>,
}

/// How to read and replay a trace file.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TraceSpec {
    /// The rows' layout.
    pub format: TraceFormat,
    /// Replay speed factor (2 = twice as fast).
    pub speed: f64,
    /// The span of the trace replayed.
    pub window: Window,
    /// Tokens (words) per hash block (`format: mooncake`).
    pub block_size: u32,
}

impl Default for TraceSpec {
    fn default() -> Self {
        TraceSpec {
            format: TraceFormat::Timestamps,
            speed: 1.0,
            window: Window::default(),
            block_size: MOONCAKE_BLOCK_SIZE,
        }
    }
}

/// A trace file that cannot be replayed: its line when one row is at fault.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceError {
    /// 1-based line of the row at fault.
    pub line: Option<usize>,
    /// What is wrong, in one line.
    pub msg: String,
}

/// What a trace file gave.
#[derive(Debug, Clone)]
pub struct Parsed {
    /// Arrival offsets from the phase's start, sorted, already divided by the speed.
    pub offsets: Vec<Duration>,
    /// `format: mooncake`: what arrival i sends (row i, in the order of `offsets`).
    pub replay: Option<Replay>,
}

/// One row before sorting: its time (seconds), its line, and what it sends.
type Timed = (f64, usize, Option<TraceRow>);

/// Reads trace `text` as `spec` says.
pub fn parse(text: &str, spec: &TraceSpec) -> Result<Parsed, TraceError> {
    let mut rows: Vec<Timed> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = |msg: String| TraceError {
            line: Some(i + 1),
            msg,
        };
        let row = match spec.format {
            TraceFormat::Timestamps => (timestamp_row(line).map_err(at)?, i + 1, None),
            TraceFormat::Mooncake => {
                let (secs, row) = mooncake_row(line, i + 1, spec.block_size).map_err(at)?;
                (secs, i + 1, Some(row))
            }
        };
        rows.push(row);
    }
    // Stable: rows of the same time keep the file's order.
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    let first = rows.first().map_or(0.0, |r| r.0);
    let last = rows.last().map_or(0.0, |r| r.0);
    let (from, until) = (
        spec.window.from.as_secs_f64(),
        spec.window.until.map_or(f64::INFINITY, |u| u.as_secs_f64()),
    );
    let had_rows = !rows.is_empty();
    let kept: Vec<Timed> = rows
        .into_iter()
        .filter(|r| (from..until).contains(&(r.0 - first)))
        .collect();
    if kept.is_empty() && had_rows {
        return Err(TraceError {
            line: None,
            msg: format!(
                "no row of the trace falls in `window` (its rows span 0 s..{} s from the first one)",
                ((last - first) * 1e3).round() / 1e3
            ),
        });
    }
    let mut offsets = Vec::with_capacity(kept.len());
    let mut replayed = Vec::new();
    for (t, line, row) in kept {
        // A huge gap (or a tiny speed) must be an error, not a Duration overflow.
        let offset = Duration::try_from_secs_f64((t - first - from) / spec.speed)
            .ok()
            .filter(|d| *d <= crate::duration::MAX)
            .ok_or_else(|| TraceError {
                line: Some(line),
                msg: format!(
                    "timestamp {t} s is more than 7 days (at speed {}) after the first one",
                    spec.speed
                ),
            })?;
        offsets.push(offset);
        replayed.extend(row);
    }
    let replay =
        (spec.format == TraceFormat::Mooncake).then(|| Replay::new(replayed, spec.block_size));
    Ok(Parsed { offsets, replay })
}

/// A row of the `timestamps` format: its time in seconds.
fn timestamp_row(line: &str) -> Result<f64, String> {
    let secs = if let Ok(v) = line.parse::<f64>() {
        v
    } else {
        let v: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| format!("neither a number nor JSON: {}", no_position(&e)))?;
        if v.get("input_length").is_some() || v.get("hash_ids").is_some() {
            // Its `timestamp` is in milliseconds: read as seconds, the replay would be 1000
            // times too slow.
            return Err(
                "a Mooncake row (`timestamp` in ms, `input_length`, `hash_ids`): set `format: mooncake` on the load"
                    .into(),
            );
        }
        if let Some(s) = v.get("timestamp").and_then(serde_json::Value::as_f64) {
            s
        } else if let Some(ms) = v.get("timestamp_ms").and_then(serde_json::Value::as_f64) {
            ms / 1000.0
        } else {
            return Err("expected `timestamp` (s) or `timestamp_ms`".into());
        }
    };
    if !secs.is_finite() {
        return Err("timestamp is not finite".into());
    }
    Ok(secs)
}

/// A row of the Mooncake layout, as published; other keys are ignored.
#[derive(Deserialize)]
struct MooncakeRow {
    timestamp: Option<f64>,
    input_length: Option<u64>,
    output_length: Option<u64>,
    #[serde(default)]
    hash_ids: Vec<u64>,
}

/// A Mooncake row: its time in seconds and what it sends.
fn mooncake_row(line: &str, n: usize, block_size: u32) -> Result<(f64, TraceRow), String> {
    let r: MooncakeRow = serde_json::from_str(line)
        .map_err(|e| format!("not a Mooncake row: {}", no_position(&e)))?;
    let ms = r
        .timestamp
        .ok_or("no `timestamp` (milliseconds since the trace's start)")?;
    if !ms.is_finite() || ms < 0.0 {
        return Err(format!("`timestamp` {ms} must be a number of ms >= 0"));
    }
    let input = r.input_length.ok_or("no `input_length` (prompt tokens)")?;
    let max_input = MAX_SYNTHETIC_PROMPT_WORDS as u64;
    if input == 0 || input > max_input {
        return Err(format!("`input_length` {input} must be 1..={max_input}"));
    }
    let output = r
        .output_length
        .ok_or("no `output_length` (tokens to generate)")?;
    if output == 0 || output > MAX_OUTPUT_LENGTH {
        return Err(format!(
            "`output_length` {output} must be 1..={MAX_OUTPUT_LENGTH}"
        ));
    }
    let blocks = input.div_ceil(u64::from(block_size));
    if r.hash_ids.len() as u64 > blocks {
        return Err(format!(
            "{} `hash_ids` for an `input_length` of {input}, which blocks of {block_size} tokens hold in {blocks}: set the load's `block_size` to the trace's",
            r.hash_ids.len()
        ));
    }
    let row = TraceRow {
        line: n as u64,
        input_length: input as u32,
        output_length: output as u32,
        hash_ids: r.hash_ids.into_boxed_slice(),
    };
    Ok((ms / 1000.0, row))
}

/// A JSON error without serde's ` at line L column C` (a trace row is one line; the line is
/// named by the caller).
fn no_position(e: &serde_json::Error) -> String {
    let msg = e.to_string();
    match msg.find(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(v: &[Duration]) -> Vec<f64> {
        v.iter().map(Duration::as_secs_f64).collect()
    }

    fn timestamps(text: &str, speed: f64) -> Result<Vec<Duration>, TraceError> {
        let spec = TraceSpec {
            speed,
            ..TraceSpec::default()
        };
        parse(text, &spec).map(|p| p.offsets)
    }

    fn mooncake(text: &str, spec: TraceSpec) -> Result<Parsed, TraceError> {
        parse(
            text,
            &TraceSpec {
                format: TraceFormat::Mooncake,
                ..spec
            },
        )
    }

    #[test]
    fn timestamp_rows() {
        let t = timestamps(
            "# comment\n10.5\n{\"timestamp\": 10}\n{\"timestamp_ms\": 12000}\n",
            2.0,
        )
        .unwrap();
        assert_eq!(secs(&t), [0.0, 0.25, 1.0]);
        assert_eq!(timestamps("1\nxx\n", 1.0).unwrap_err().line, Some(2));
        // A gap beyond any phase names its line instead of overflowing a Duration.
        let e = timestamps("0\n1e300\n5\n", 1.0).unwrap_err();
        assert_eq!(e.line, Some(2), "{e:?}");
        assert!(e.msg.contains("7 days"), "{e:?}");
        assert_eq!(timestamps("0\n1\n", 1e-300).unwrap_err().line, Some(2));
        assert!(timestamps("# nothing\n", 1.0).unwrap().is_empty());
    }

    #[test]
    fn a_mooncake_file_is_not_read_as_seconds() {
        let e = timestamps(PUBLISHED, 1.0).unwrap_err();
        assert_eq!(e.line, Some(1));
        assert!(e.msg.contains("set `format: mooncake`"), "{e:?}");
    }

    /// Two rows of the Mooncake FAST'25 README, as published.
    const PUBLISHED: &str = "{\"timestamp\": 27482, \"input_length\": 6955, \"output_length\": 52, \"hash_ids\": [46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 2353, 2354]}\n{\"timestamp\": 30535, \"input_length\": 6472, \"output_length\": 26, \"hash_ids\": [46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 2366]}\n";

    #[test]
    fn published_mooncake_rows_with_ms_timestamps() {
        let p = mooncake(PUBLISHED, TraceSpec::default()).unwrap();
        // Milliseconds: the second row is 3.053 s after the first.
        assert_eq!(secs(&p.offsets), [0.0, 3.053]);
        let r = p.replay.unwrap();
        assert_eq!(r.len(), 2);
        let rows: Vec<(u32, u32, usize)> = (0..2)
            .map(|i| {
                let row = r.row(i);
                (row.input_length, row.output_length, row.hash_ids.len())
            })
            .collect();
        assert_eq!(rows, [(6955, 52, 14), (6472, 26, 13)]);
        // Unknown keys (a session id) are ignored; hash ids are optional.
        let p = mooncake(
            "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 2, \"session_id\": \"a\"}\n",
            TraceSpec::default(),
        )
        .unwrap();
        assert!(p.replay.unwrap().row(0).hash_ids.is_empty());
    }

    #[test]
    fn speed_window_and_order() {
        let text = "{\"timestamp\": 4000, \"input_length\": 4, \"output_length\": 1}\n\
                    {\"timestamp\": 1000, \"input_length\": 1, \"output_length\": 1}\n\
                    {\"timestamp\": 2000, \"input_length\": 2, \"output_length\": 1}\n\
                    {\"timestamp\": 2000, \"input_length\": 3, \"output_length\": 1}\n\
                    {\"timestamp\": 7000, \"input_length\": 5, \"output_length\": 1}\n";
        let spec = TraceSpec {
            speed: 2.0,
            ..TraceSpec::default()
        };
        let p = mooncake(text, spec).unwrap();
        assert_eq!(secs(&p.offsets), [0.0, 0.5, 0.5, 1.5, 3.0]);
        // Rows sorted by time, ties in the file's order: arrival i sends row i.
        let lens: Vec<u32> = (0..5)
            .map(|i| p.replay.as_ref().unwrap().row(i).input_length)
            .collect();
        assert_eq!(lens, [1, 2, 3, 4, 5]);
        // The window [0.5 s, 3 s) of the trace's clock (from its first row) keeps the two
        // rows at +1 s; they go at the phase's start plus their distance from `from`, at
        // speed 2.
        let w = TraceSpec {
            window: Window {
                from: Duration::from_millis(500),
                until: Some(Duration::from_secs(3)),
            },
            ..spec
        };
        let p = mooncake(text, w).unwrap();
        assert_eq!(secs(&p.offsets), [0.25, 0.25]);
        let lens: Vec<u32> = (0..2)
            .map(|i| p.replay.as_ref().unwrap().row(i).input_length)
            .collect();
        assert_eq!(lens, [2, 3]);
        let empty = TraceSpec {
            window: Window {
                from: Duration::from_secs(100),
                until: None,
            },
            ..spec
        };
        let e = mooncake(text, empty).unwrap_err();
        assert_eq!(e.line, None);
        assert!(
            e.msg.contains("no row of the trace falls in `window`"),
            "{e:?}"
        );
        assert!(e.msg.contains("0 s..6 s"), "{e:?}");
    }

    #[test]
    fn malformed_rows_name_their_line_in_one_line() {
        let ok = "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 2}\n";
        for (bad, says) in [
            (
                "{\"timestamp\": 5, \"input_length\": 10",
                "not a Mooncake row",
            ),
            (
                "{\"input_length\": 10, \"output_length\": 2}",
                "no `timestamp`",
            ),
            (
                "{\"timestamp\": -1, \"input_length\": 10, \"output_length\": 2}",
                "must be a number of ms >= 0",
            ),
            (
                "{\"timestamp\": 1, \"output_length\": 2}",
                "no `input_length`",
            ),
            (
                "{\"timestamp\": 1, \"input_length\": 0, \"output_length\": 2}",
                "`input_length` 0 must be",
            ),
            (
                "{\"timestamp\": 1, \"input_length\": 10}",
                "no `output_length`",
            ),
            (
                "{\"timestamp\": 1, \"input_length\": 10, \"output_length\": 0}",
                "`output_length` 0 must be",
            ),
            (
                "{\"timestamp\": 1, \"input_length\": \"ten\", \"output_length\": 2}",
                "invalid type",
            ),
            (
                "{\"timestamp\": 1, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [1, -2]}",
                "invalid value",
            ),
            (
                "{\"timestamp\": 1, \"input_length\": 600, \"output_length\": 2, \"hash_ids\": [1, 2, 3]}",
                "3 `hash_ids` for an `input_length` of 600, which blocks of 512 tokens hold in 2",
            ),
        ] {
            let e = mooncake(&format!("{ok}\n{bad}\n"), TraceSpec::default()).unwrap_err();
            assert_eq!(e.line, Some(3), "{bad}: {e:?}");
            assert!(e.msg.contains(says), "{bad}: {e:?}");
            assert!(!e.msg.contains('\n') && !e.msg.contains("at line"), "{e:?}");
        }
    }
}

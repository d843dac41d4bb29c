//! Prompt complexity: a 0-100 score per prompt or request, and the arrival shaping that spaces
//! complex requests out (`load: {..., complexity_shaping: true}`).
//!
//! # The score
//!
//! Three factors, each saturating, each monotone (more of it never lowers the score):
//!
//! | factor | measured as | points |
//! |---|---|---|
//! | nesting `D` | deepest nesting in the text: open brackets `(` `[` `{` (a closer without an opener is ignored), +1 inside a code fence (```` ``` ```` or `~~~`), and Markdown list depth (nested `-`/`*`/`+`/`1.` items by indentation); `D` is the largest of these | `35 * min(D, 7) / 7` (5 per level) |
//! | tools `T` | tool definitions (entries of a request's `tools` and legacy `functions` arrays, `"parameters"` schemas pasted into the text) plus tool calls in the text (`"arguments"`, `<tool_call>`, `<function=`) | `30 * min(T, 6) / 6` (5 per tool) |
//! | context `L` | tokens, estimated as `max(words, ceil(chars / 4))` (about four characters per token for English BPE vocabularies; never fewer than the whitespace-separated words) | `35 * clamp(log2(L / 16) / 11, 0, 1)` (0 at 16 tokens or fewer, 35 at 32768 or more) |
//!
//! `score = round(nesting + tools + context)`, so 0 for a one-line question and 100 for a deeply
//! nested, tool-heavy prompt of 32k tokens. The context term is log-scaled because the cost of a
//! prompt grows with its length but what a model finds hard does not double with each doubling.
//!
//! # Shaping
//!
//! With shaping, request `i` of score `s` arrives after the base schedule's gap (the gap before
//! it in the phase's constant, Poisson, gamma or ramp schedule) divided by `0.75^(s/20)`, so its
//! effective rate is `base * 0.75^(s/20)`: a score of 0 keeps the base rate, 20 gives 75% of it,
//! 100 gives 24%. A phase of prompts of one score `s` sends `base * 0.75^(s/20) * duration`
//! requests; a mix sends at the harmonic mean of the factors. The base schedule is drawn as
//! without shaping; the shaped one ends when it passes the phase's end.

use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

/// Points for nesting, tools and context at saturation (they add up to 100).
pub const NESTING_POINTS: f64 = 35.0;
/// See [`NESTING_POINTS`].
pub const TOOL_POINTS: f64 = 30.0;
/// See [`NESTING_POINTS`].
pub const CONTEXT_POINTS: f64 = 35.0;
/// Nesting depth at which the nesting term saturates.
pub const MAX_DEPTH: u32 = 7;
/// Tool definitions plus calls at which the tool term saturates.
pub const MAX_TOOLS: u32 = 6;
/// Tokens at or below which the context term is 0.
pub const MIN_TOKENS: f64 = 16.0;
/// Tokens at or above which the context term saturates (`16 * 2^11`).
pub const MAX_TOKENS: f64 = 32_768.0;

/// A prompt's score and the factors behind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, schemars::JsonSchema)]
pub struct Complexity {
    /// 0-100.
    pub score: u8,
    /// Deepest nesting (brackets, code fences, list levels).
    pub nesting: u32,
    /// Tool definitions plus tool calls.
    pub tools: u32,
    /// Estimated tokens.
    pub tokens: u32,
}

impl Complexity {
    /// The score of `nesting`, `tools` and `tokens` by the module's formula.
    #[must_use]
    pub fn from_factors(nesting: u32, tools: u32, tokens: u32) -> Self {
        let n = NESTING_POINTS * f64::from(nesting.min(MAX_DEPTH)) / f64::from(MAX_DEPTH);
        let t = TOOL_POINTS * f64::from(tools.min(MAX_TOOLS)) / f64::from(MAX_TOOLS);
        let ctx = (f64::from(tokens.max(1)) / MIN_TOKENS).log2() / (MAX_TOKENS / MIN_TOKENS).log2();
        let c = CONTEXT_POINTS * ctx.clamp(0.0, 1.0);
        Complexity {
            score: (n + t + c).round().clamp(0.0, 100.0) as u8,
            nesting,
            tools,
            tokens,
        }
    }

    /// The effective-rate factor of this score: `0.75^(score/20)`.
    #[must_use]
    pub fn rate_factor(self) -> f64 {
        rate_factor(self.score)
    }
}

/// `0.75^(score/20)`: the share of the base rate a request of this score is sent at.
#[must_use]
pub fn rate_factor(score: u8) -> f64 {
    0.75f64.powf(f64::from(score) / 20.0)
}

/// The complexity of a prompt text (no tool definitions besides those written into it).
#[must_use]
pub fn of_text(text: &str) -> Complexity {
    Complexity::from_factors(nesting(text), tool_mentions(text), tokens(text))
}

/// The complexity of a request body: a chat (`messages[].content`, text parts included) or
/// completions (`prompt`) JSON body, with its `tools`/`functions` definitions; a body that is
/// not JSON is scored as text.
#[must_use]
pub fn of_request(body: &[u8]) -> Complexity {
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return of_text(&String::from_utf8_lossy(body));
    };
    let mut text = String::new();
    collect_text(v.get("prompt"), &mut text);
    if let Some(messages) = v.get("messages").and_then(Value::as_array) {
        for m in messages {
            collect_text(m.get("content"), &mut text);
            // An assistant turn's tool calls are calls in the context.
            if let Some(calls) = m.get("tool_calls").and_then(Value::as_array) {
                for c in calls {
                    collect_text(Some(&Value::String(c.to_string())), &mut text);
                }
            }
        }
    }
    let defs = ["tools", "functions"]
        .iter()
        .filter_map(|k| v.get(*k).and_then(Value::as_array))
        .map(Vec::len)
        .sum::<usize>();
    let base = of_text(&text);
    Complexity::from_factors(
        base.nesting,
        base.tools.saturating_add(defs as u32),
        base.tokens,
    )
}

/// Appends the text of a `content`/`prompt` value: a string, or an array of strings or of
/// `{"type": "text", "text": ..}` parts.
fn collect_text(v: Option<&Value>, out: &mut String) {
    match v {
        Some(Value::String(s)) => {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(s);
        }
        Some(Value::Array(parts)) => {
            for p in parts {
                match p {
                    Value::String(_) => collect_text(Some(p), out),
                    _ => collect_text(p.get("text"), out),
                }
            }
        }
        _ => {}
    }
}

/// Deepest nesting: brackets (+1 inside a code fence) or Markdown list levels.
#[must_use]
pub fn nesting(text: &str) -> u32 {
    let mut deepest = 0u32;
    let mut brackets = 0u32;
    let mut fence = 0u32;
    // Indentations of the open list levels, outermost first.
    let mut lists: Vec<usize> = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fence ^= 1;
            deepest = deepest.max(fence + brackets);
            continue;
        }
        if fence == 0 && !trimmed.is_empty() {
            let indent: usize = line[..line.len() - trimmed.len()]
                .chars()
                .map(|c| if c == '\t' { 4 } else { 1 })
                .sum();
            if is_list_item(trimmed) {
                while lists.last().is_some_and(|&i| i > indent) {
                    lists.pop();
                }
                if lists.last().is_none_or(|&i| i < indent) {
                    lists.push(indent);
                }
                deepest = deepest.max(lists.len() as u32);
            } else if indent == 0 {
                lists.clear();
            }
        }
        for c in line.chars() {
            match c {
                '(' | '[' | '{' => {
                    brackets += 1;
                    deepest = deepest.max(fence + brackets);
                }
                ')' | ']' | '}' => brackets = brackets.saturating_sub(1),
                _ => {}
            }
        }
    }
    deepest
}

/// `- x`, `* x`, `+ x`, `1. x`, `1) x`.
fn is_list_item(trimmed: &str) -> bool {
    let rest = match trimmed.as_bytes().first() {
        Some(b'-' | b'*' | b'+') => &trimmed[1..],
        Some(b) if b.is_ascii_digit() => {
            let digits = trimmed.bytes().take_while(u8::is_ascii_digit).count();
            match trimmed.as_bytes().get(digits) {
                Some(b'.' | b')') => &trimmed[digits + 1..],
                _ => return false,
            }
        }
        _ => return false,
    };
    rest.starts_with([' ', '\t'])
}

/// Tool definitions and calls written into a text (see the module documentation).
#[must_use]
pub fn tool_mentions(text: &str) -> u32 {
    [
        "\"parameters\"",
        "\"arguments\"",
        "<tool_call>",
        "<function=",
    ]
    .iter()
    .map(|p| text.matches(p).count() as u32)
    .sum()
}

/// Estimated tokens: `max(words, ceil(chars / 4))`.
#[must_use]
pub fn tokens(text: &str) -> u32 {
    let words = text.split_whitespace().count();
    let chars = text.chars().count();
    words.max(chars.div_ceil(4)).min(u32::MAX as usize) as u32
}

/// Spaces a base schedule's arrivals by each request's score: the gap before a request of
/// score `s` is the base gap divided by `0.75^(s/20)` (see the module documentation).
#[derive(Debug, Clone)]
pub struct Shaper {
    /// The phase's length: no shaped arrival after it.
    end: Duration,
    /// The base schedule's previous offset.
    base: Duration,
    /// The shaped schedule's previous offset.
    shaped: Duration,
}

impl Shaper {
    /// A shaper for a phase of length `end`.
    #[must_use]
    pub fn new(end: Duration) -> Self {
        Shaper {
            end,
            base: Duration::ZERO,
            shaped: Duration::ZERO,
        }
    }

    /// The shaped offset of the request whose base offset is `base` and whose score is
    /// `score`; `None` once the shaped schedule has passed the phase's end.
    pub fn next(&mut self, base: Duration, score: u8) -> Option<Duration> {
        let gap = base.saturating_sub(self.base).as_secs_f64() / rate_factor(score);
        self.base = base;
        let at = self.shaped.as_secs_f64() + gap;
        if at > self.end.as_secs_f64() {
            return None;
        }
        self.shaped = Duration::from_secs_f64(at);
        Some(self.shaped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loadgen::scenario::arrival::{Arrival, Schedule};
    use rand::{SeedableRng, rngs::SmallRng};

    #[test]
    fn the_formula_at_its_corners() {
        assert_eq!(Complexity::from_factors(0, 0, 1).score, 0);
        assert_eq!(Complexity::from_factors(0, 0, 16).score, 0);
        assert_eq!(Complexity::from_factors(7, 6, 32_768).score, 100);
        assert_eq!(Complexity::from_factors(99, 99, u32::MAX).score, 100);
        assert_eq!(Complexity::from_factors(1, 0, 16).score, 5);
        assert_eq!(Complexity::from_factors(0, 1, 16).score, 5);
        // 16 * 2^5.5 = 724.1 tokens is half of the context term (17.5 points).
        assert_eq!(Complexity::from_factors(0, 0, 724).score, 17);
        assert_eq!(Complexity::from_factors(0, 0, 725).score, 18);
        assert!((rate_factor(20) - 0.75).abs() < 1e-12);
        assert!((rate_factor(100) - 0.75f64.powi(5)).abs() < 1e-12);
        assert!((rate_factor(0) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn nesting_counts_brackets_fences_and_lists() {
        assert_eq!(nesting("What is the capital of France?"), 0);
        assert_eq!(nesting("f(a, [b, {c: 1}])"), 3);
        // A closer without an opener does not go below zero.
        assert_eq!(nesting("1) one 2) two (three)"), 1);
        assert_eq!(nesting("```\nlet x = vec![1];\n```"), 2);
        assert_eq!(
            nesting("- a\n  - b\n    - c\n  - d\n- e\n\n1. x\n   1. y"),
            3
        );
        assert_eq!(nesting("-not a list\n* yes"), 1);
        assert_eq!(nesting("\tx\n- a\n\t- b"), 2);
    }

    #[test]
    fn requests_count_their_tools_and_message_text() {
        let flat = br#"{"model":"m","messages":[{"role":"user","content":"hi there"}]}"#;
        assert_eq!(of_request(flat), of_text("hi there"));
        let tools = br#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"weather in {city}?"}]}],
            "tools":[{"type":"function","function":{"name":"w","parameters":{"type":"object"}}},{"type":"function","function":{"name":"x"}}]}"#;
        let c = of_request(tools);
        assert_eq!((c.tools, c.nesting), (2, 1), "{c:?}");
        let completions =
            br#"{"prompt":"<tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call>"}"#;
        assert_eq!(of_request(completions).tools, 2);
        assert_eq!(of_request(b"not json ((("), of_text("not json ((("));
    }

    #[test]
    fn each_factor_raises_the_score() {
        let words = |n: usize| vec!["word"; n].join(" ");
        let mut last = 0;
        for n in [1, 20, 100, 1000, 10_000, 40_000] {
            let s = of_text(&words(n)).score;
            assert!(s >= last, "{n} words: {s} < {last}");
            last = s;
        }
        assert!(last >= 34, "{last}");
        let mut last = 0;
        for d in 0..9 {
            let s = of_text(&format!("{}x{}", "[".repeat(d), "]".repeat(d))).score;
            assert!(s >= last);
            last = s;
        }
        assert_eq!(last, 35);
        let mut last = 0;
        for t in 0..8 {
            let s = of_text(&"<tool_call>".repeat(t)).score;
            assert!(s >= last);
            last = s;
        }
        assert!(last >= 30);
    }

    /// Arrivals over a phase of prompts of one score: `base * 0.75^(s/20) * duration`.
    #[test]
    fn shaped_counts_follow_the_formula() {
        let d = Duration::from_mins(1);
        for base in [20.0, 120.0] {
            for score in [0u8, 20, 40, 60, 100] {
                let want = base * rate_factor(score) * d.as_secs_f64();
                for arrival in [
                    Arrival::Constant(base),
                    Arrival::Gamma {
                        rate: base,
                        burstiness: 1.0,
                    },
                ] {
                    let mut rng = SmallRng::seed_from_u64(u64::from(score));
                    let mut shaper = Shaper::new(d);
                    let n = Schedule::new(&arrival, d, &mut rng)
                        .map_while(|off| shaper.next(off, score))
                        .count() as f64;
                    // Constant: the first arrival at 0 is the one over. Poisson: the count of
                    // the base arrivals before `duration * factor` is binomial, sd < sqrt(n).
                    let tol = match arrival {
                        Arrival::Gamma { .. } => 3.0 * want.sqrt(),
                        _ => 1.0,
                    };
                    assert!(
                        (n - want).abs() <= tol,
                        "{arrival:?} s={score}: {n} for {want:.1}"
                    );
                }
            }
        }
    }

    #[test]
    fn complexity_shaping_parses_on_open_loop_shapes_only() {
        use crate::loadgen::scenario::shape::Load;
        let parse = serde_norway::from_str::<Load>;
        let l = parse("{shape: poisson, rate: 10, complexity_shaping: true}").unwrap();
        assert!(l.complexity_shaping());
        assert!(l.arrival().is_some());
        assert_eq!(l.target_rate(Duration::from_secs(1)), Some(10.0));
        assert_eq!(l.level(), "rate=10/s complexity-shaped");
        let l = parse("{shape: constant, rate: 10, complexity_shaping: false}").unwrap();
        assert!(!l.complexity_shaping());
        // A knee search's step keeps the shaping of its phase, on rates only.
        let g = parse("{shape: gamma, rate: 4, burstiness: 2, complexity_shaping: true}").unwrap();
        assert!(matches!(g.unshaped(), Load::Gamma { .. }));
        assert!(
            g.shaped_like(Load::Constant { rate: 3.0 })
                .complexity_shaping()
        );
        assert!(
            !g.shaped_like(Load::Concurrency { users: 2 })
                .complexity_shaping()
        );
        assert!(
            !l.shaped_like(Load::Constant { rate: 3.0 })
                .complexity_shaping()
        );
        for bad in [
            "{shape: concurrency, users: 2, complexity_shaping: true}",
            "{shape: trace, path: t.txt, complexity_shaping: true}",
        ] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(e.contains("use constant, poisson, gamma or ramp"), "{e}");
        }
    }

    #[test]
    fn a_mix_of_scores_gets_each_its_own_gap() {
        let mut shaper = Shaper::new(Duration::from_secs(10));
        let at = |s: &mut Shaper, base: f64, score| {
            s.next(Duration::from_secs_f64(base), score)
                .unwrap()
                .as_secs_f64()
        };
        assert!((at(&mut shaper, 0.0, 100) - 0.0).abs() < 1e-9);
        assert!((at(&mut shaper, 1.0, 0) - 1.0).abs() < 1e-9);
        assert!((at(&mut shaper, 2.0, 20) - (1.0 + 1.0 / 0.75)).abs() < 1e-9);
        assert!((at(&mut shaper, 3.0, 40) - (1.0 + 1.0 / 0.75 + 1.0 / 0.5625)).abs() < 1e-9);
        assert_eq!(shaper.next(Duration::from_secs(9), 100), None);
    }
}

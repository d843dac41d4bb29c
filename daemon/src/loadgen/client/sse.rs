//! Incremental Server-Sent Events parser (WHATWG `text/event-stream` rules).
//!
//! Bytes arrive in arbitrary pieces; the parser keeps the partial line between calls,
//! accepts LF, CRLF and lone CR line ends (a CR at the end of one piece and an LF at the
//! start of the next are one line end), skips `:` comments, joins multi-line `data:`
//! with `\n`, and dispatches an event on each blank line. It never panics on any input.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` field, when one was given.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// Input the parser refuses.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SseError {
    /// A line is not UTF-8.
    #[error("SSE line is not valid UTF-8")]
    Utf8,
    /// A line grew past the limit without a line end.
    #[error("SSE line longer than {0} bytes")]
    LineTooLong(usize),
    /// The `data:` lines of one event add up past the limit without a blank line.
    #[error("SSE event longer than {0} bytes")]
    EventTooLong(usize),
}

/// What was left when the stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tail {
    /// The stream ended on an event boundary.
    Clean,
    /// The stream ended inside a line or inside an event (no blank line after it).
    Truncated,
}

/// Longest line accepted (a usage chunk or one huge delta fits easily).
pub const MAX_LINE: usize = 16 << 20;
/// Longest event accepted: its `data:` lines joined.
pub const MAX_EVENT: usize = 16 << 20;

/// Incremental parser state.
#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    // The previous piece ended with CR: an LF at the start of the next one is part of it.
    skip_lf: bool,
    event: Option<String>,
    data: String,
    has_data: bool,
    has_fields: bool,
}

impl SseParser {
    /// A parser at the start of a stream.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds the next piece of the body; complete events are appended to `out`.
    pub fn push(&mut self, mut chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if self.skip_lf {
            self.skip_lf = false;
            if let Some(rest) = chunk.strip_prefix(b"\n") {
                chunk = rest;
            }
        }
        while let Some(pos) = chunk.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.line.extend_from_slice(&chunk[..pos]);
            let is_cr = chunk[pos] == b'\r';
            chunk = &chunk[pos + 1..];
            if is_cr {
                match chunk.first() {
                    Some(b'\n') => chunk = &chunk[1..],
                    None => self.skip_lf = true,
                    Some(_) => {}
                }
            }
            let line = std::mem::take(&mut self.line);
            self.line_done(&line, out)?;
            self.line = line;
            self.line.clear();
        }
        if self.line.len() + chunk.len() > MAX_LINE {
            return Err(SseError::LineTooLong(MAX_LINE));
        }
        self.line.extend_from_slice(chunk);
        Ok(())
    }

    /// Ends the stream. A partial line or an event without its blank line is dropped
    /// (as the spec says) and reported as [`Tail::Truncated`].
    pub fn finish(&mut self) -> Tail {
        let truncated = !self.line.is_empty() || self.has_fields;
        *self = Self::default();
        if truncated {
            Tail::Truncated
        } else {
            Tail::Clean
        }
    }

    fn line_done(&mut self, line: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if line.is_empty() {
            if self.has_data {
                out.push(SseEvent {
                    event: self.event.take(),
                    data: std::mem::take(&mut self.data),
                });
            }
            self.event = None;
            self.data.clear();
            self.has_data = false;
            self.has_fields = false;
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(());
        }
        let line = std::str::from_utf8(line).map_err(|_| SseError::Utf8)?;
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        self.has_fields = true;
        match field {
            "data" => {
                if self.data.len() + value.len() + 1 > MAX_EVENT {
                    return Err(SseError::EventTooLong(MAX_EVENT));
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_string()),
            // id and retry matter for reconnecting clients; a benchmark never reconnects.
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(pieces: &[&[u8]]) -> (Vec<SseEvent>, Tail) {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for piece in pieces {
            p.push(piece, &mut out).unwrap();
        }
        (out, p.finish())
    }

    #[test]
    fn an_event_of_endless_data_lines_is_refused() {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        let line = format!("data: {}\n", "x".repeat(1 << 16));
        let mut err = None;
        // 300 lines of 64 KiB: past the 16 MiB event limit without any blank line.
        for _ in 0..300 {
            if let Err(e) = p.push(line.as_bytes(), &mut out) {
                err = Some(e);
                break;
            }
        }
        assert_eq!(err, Some(SseError::EventTooLong(MAX_EVENT)));
        assert!(out.is_empty());
    }

    fn data(events: &[SseEvent]) -> Vec<&str> {
        events.iter().map(|e| e.data.as_str()).collect()
    }

    const STREAM: &[u8] = b": keep-alive\n\ndata: {\"a\":1}\n\nevent: error\ndata: {\"error\":{}}\n\ndata: line1\ndata: line2\n\ndata: [DONE]\n\n";

    #[test]
    fn whole_stream() {
        let (ev, tail) = parse_all(&[STREAM]);
        assert_eq!(
            data(&ev),
            ["{\"a\":1}", "{\"error\":{}}", "line1\nline2", "[DONE]"]
        );
        assert_eq!(ev[1].event.as_deref(), Some("error"));
        assert_eq!(ev[0].event, None);
        assert_eq!(tail, Tail::Clean);
    }

    #[test]
    fn split_at_every_byte_boundary() {
        let (want, _) = parse_all(&[STREAM]);
        for i in 0..=STREAM.len() {
            for j in i..=STREAM.len() {
                let (got, tail) = parse_all(&[&STREAM[..i], &STREAM[i..j], &STREAM[j..]]);
                assert_eq!(got, want, "split at {i},{j}");
                assert_eq!(tail, Tail::Clean);
            }
        }
    }

    #[test]
    fn crlf_and_cr_line_ends_at_every_split() {
        let crlf: Vec<u8> = String::from_utf8_lossy(STREAM)
            .replace('\n', "\r\n")
            .into_bytes();
        let cr: Vec<u8> = String::from_utf8_lossy(STREAM)
            .replace('\n', "\r")
            .into_bytes();
        let (want, _) = parse_all(&[STREAM]);
        for input in [&crlf, &cr] {
            for i in 0..=input.len() {
                let (got, tail) = parse_all(&[&input[..i], &input[i..]]);
                assert_eq!(got, want, "split at {i}");
                assert_eq!(tail, Tail::Clean);
            }
        }
    }

    #[test]
    fn comments_and_unknown_fields_are_ignored() {
        let (ev, _) = parse_all(&[b":comment\nid: 7\nretry: 10\nfoo\ndata:x\n\n:only comment\n\n"]);
        assert_eq!(data(&ev), ["x"]);
    }

    #[test]
    fn no_space_after_colon_and_empty_data() {
        let (ev, _) = parse_all(&[b"data:abc\n\ndata\n\ndata:  two spaces\n\n"]);
        assert_eq!(data(&ev), ["abc", "", " two spaces"]);
    }

    #[test]
    fn truncated_inside_line_and_inside_event() {
        let (ev, tail) = parse_all(&[b"data: {\"a\":1}\n\ndata: {\"b\""]);
        assert_eq!(data(&ev), ["{\"a\":1}"]);
        assert_eq!(tail, Tail::Truncated);
        let (ev, tail) = parse_all(&[b"data: {\"a\":1}\n\ndata: {\"b\":2}\n"]);
        assert_eq!(ev.len(), 1);
        assert_eq!(tail, Tail::Truncated);
    }

    #[test]
    fn invalid_utf8_is_an_error_not_a_panic() {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        assert_eq!(p.push(b"data: \xff\xfe\n", &mut out), Err(SseError::Utf8));
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        let mut x: u32 = 12345;
        for _ in 0..20_000 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            let b = [b'd', b'a', b':', b'\n', b'\r', b' ', 0xff, b'x'][(x >> 16) as usize % 8];
            let _ = p.push(&[b], &mut out);
        }
        let _ = p.finish();
    }
}

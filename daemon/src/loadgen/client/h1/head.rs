//! An answer's head, parsed: status, framing of the body, reuse of the connection.

use super::Failed;

/// An answer's head: what the body's framing and the connection's reuse depend on.
pub(super) struct Head {
    pub(super) status: u16,
    pub(super) len: usize,
    pub(super) framing: Framing,
    pub(super) keep_alive: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Framing {
    Length(u64),
    Chunked,
    UntilClose,
}

/// Parses an answer's head from the start of `buf`; `None` while it is incomplete. Bytes, not
/// `str`: only three headers matter, and a UTF-8 check and char searches of every line cost a
/// plain GET as much as the rest of its parsing.
pub(super) fn parse_head(buf: &[u8]) -> Result<Option<Head>, Failed> {
    let Some(end) = head_end(buf) else {
        return Ok(None);
    };
    let mut lines = buf[..end]
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let status_line = lines.next().unwrap_or_default();
    let http10 = match status_line.get(..9) {
        Some(b"HTTP/1.1 ") => false,
        Some(b"HTTP/1.0 ") => true,
        _ => {
            return Err(Failed::parse(format!(
                "invalid HTTP version in answer: {:?}",
                String::from_utf8_lossy(&status_line[..status_line.len().min(40)])
            )));
        }
    };
    let status = match status_line.get(9..12) {
        Some(&[a @ b'1'..=b'9', b @ b'0'..=b'9', c @ b'0'..=b'9'])
            if status_line.get(12).is_none_or(|&b| b == b' ') =>
        {
            u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0')
        }
        _ => return Err(Failed::parse("invalid HTTP status code in answer")),
    };
    let mut length = None;
    let mut chunked = false;
    let mut keep_alive = !http10;
    for l in lines.filter(|l| !l.is_empty()) {
        let colon = l
            .iter()
            .position(|&b| b == b':')
            .ok_or_else(|| Failed::parse("invalid header line in answer"))?;
        // No whitespace before the colon (RFC 9112 5.1): the name is as it stands. The value
        // is trimmed only for the three headers read.
        let (name, value) = (&l[..colon], &l[colon + 1..]);
        if name.eq_ignore_ascii_case(b"content-length") {
            let n = digits(value.trim_ascii())
                .ok_or_else(|| Failed::parse("invalid content-length in answer"))?;
            if length.is_some_and(|m| m != n) {
                return Err(Failed::parse("conflicting content-length in answer"));
            }
            length = Some(n);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            chunked = value
                .rsplit(|&b| b == b',')
                .next()
                .is_some_and(|v| v.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if name.eq_ignore_ascii_case(b"connection") {
            for token in value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                if token.eq_ignore_ascii_case(b"close") {
                    keep_alive = false;
                } else if token.eq_ignore_ascii_case(b"keep-alive") && http10 {
                    keep_alive = true;
                }
            }
        }
    }
    // Transfer-Encoding wins over Content-Length (RFC 9112 6.3).
    let framing = match (chunked, length) {
        (true, _) => Framing::Chunked,
        (false, Some(n)) => Framing::Length(n),
        (false, None) => Framing::UntilClose,
    };
    Ok(Some(Head {
        status,
        len: end,
        framing,
        keep_alive,
    }))
}

/// A decimal number of at most 19 digits.
fn digits(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(v.iter().fold(0, |n, d| n * 10 + u64::from(d - b'0')))
}

/// The length of the head (through its empty line), when `buf` holds all of it.
fn head_end(buf: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = buf[from..].iter().position(|&b| b == b'\n') {
        let at = from + i;
        let rest = &buf[at + 1..];
        if rest.starts_with(b"\r\n") {
            return Some(at + 3);
        }
        if rest.starts_with(b"\n") {
            return Some(at + 2);
        }
        from = at + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(s: &str) -> Head {
        match parse_head(s.as_bytes()) {
            Ok(Some(h)) => h,
            Ok(None) => panic!("incomplete: {s:?}"),
            Err(f) => panic!("{}", f.msg),
        }
    }

    #[test]
    fn heads_parse_with_their_framing_and_reuse() {
        let h = head("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
        assert_eq!(
            (h.status, h.len, h.framing, h.keep_alive),
            (200, 38, Framing::Length(2), true)
        );
        let h =
            head("HTTP/1.1 503 Busy\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
        assert_eq!(
            (h.status, h.framing, h.keep_alive),
            (503, Framing::Chunked, false)
        );
        let h = head("HTTP/1.0 200 OK\n\n");
        assert_eq!((h.framing, h.keep_alive), (Framing::UntilClose, false));
        let h = head("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n");
        assert_eq!((h.framing, h.keep_alive), (Framing::Length(0), true));
        assert!(
            parse_head(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n")
                .unwrap()
                .is_none()
        );
        assert!(parse_head(b"SSH-2.0 x\r\n\r\n").is_err());
        assert!(parse_head(b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n").is_err());
        assert!(parse_head(b"HTTP/1.1 200 OK\r\ncontent-length:\r\n\r\n").is_err());
        let h = head("HTTP/1.1 200 OK\r\nContent-Length:12345 \r\n\r\n");
        assert_eq!(h.framing, Framing::Length(12345));
        assert!(parse_head(b"HTTP/1.1 20x OK\r\n\r\n").is_err());
        assert!(parse_head(b"HTTP/1.1 2000 OK\r\n\r\n").is_err());
        assert_eq!(head("HTTP/1.1 404\r\n\r\n").status, 404);
        assert!(
            parse_head(b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n")
                .is_err()
        );
    }
}

//! Reading a whole answer's body (bounded), and a non-2xx answer's failure.

use std::time::Instant;

use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::{Response, body::Incoming};

use super::elapsed::us_since;
use super::errors::error_chain;
use crate::measure::record::{ErrorClass, RequestRecord};

/// Largest non-streamed response body read, bytes.
pub const MAX_BODY: usize = 32 << 20;

/// Reads a whole body, at most [`MAX_BODY`] bytes, or classifies the failure.
pub async fn read_body(
    resp: Response<Incoming>,
    rec: &mut RequestRecord,
    t0: Instant,
) -> Option<Bytes> {
    // By hand rather than `Limited` + `collect`: a body of one chunk (most answers) is kept as
    // it came, without the list of chunks `collect` allocates per request.
    let mut body = resp.into_body();
    let mut first = Bytes::new();
    let mut joined: Option<bytes::BytesMut> = None;
    let mut len = 0usize;
    while let Some(frame) = body.frame().await {
        let data = match frame.map(hyper::body::Frame::into_data) {
            Ok(Ok(data)) => data,
            // Trailers: not part of the body.
            Ok(Err(_)) => continue,
            Err(e) => {
                rec.fail(ErrorClass::Transport, error_chain(&e));
                rec.end_us = us_since(t0);
                return None;
            }
        };
        if data.is_empty() {
            continue;
        }
        len += data.len();
        if len > MAX_BODY {
            rec.fail(
                ErrorClass::MalformedStream,
                format!("response body larger than {} MiB", MAX_BODY >> 20),
            );
            rec.end_us = us_since(t0);
            return None;
        }
        match &mut joined {
            Some(all) => all.extend_from_slice(&data),
            None if first.is_empty() => first = data,
            None => {
                let mut all = bytes::BytesMut::with_capacity(len);
                all.extend_from_slice(&first);
                all.extend_from_slice(&data);
                joined = Some(all);
            }
        }
    }
    Some(joined.map_or(first, bytes::BytesMut::freeze))
}

/// Marks a non-2xx answer as failed with the server's `error.message` when present.
pub fn fail_status(rec: &mut RequestRecord, status: u16, body: &[u8]) {
    let msg = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            v.pointer("/error/message")
                .and_then(|m| m.as_str().map(str::to_string))
        })
        .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned());
    rec.fail(ErrorClass::HttpStatus, format!("HTTP {status}: {msg}"));
}

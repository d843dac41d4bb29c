//! Sending a chat or completions request and reading its answer, streamed or whole, into the
//! request's record.

use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::Request;
use serde_json::Value;

use super::stream::{StreamState, ToolCall};
use crate::loadgen::client::{
    fail_status, read_body, us_since,
    via::{Via, send},
};
use crate::measure::record::{ErrorClass, RequestRecord};

/// How to read an answer.
#[derive(Debug, Clone, Copy)]
pub struct Call {
    /// Server-sent events, else one JSON answer.
    pub stream: bool,
    /// The chaos knob that closes the stream after the first token.
    pub abort_after_first: bool,
    /// Keep the answer's text (a conversation's history).
    pub keep_text: bool,
}

/// What a chat answer said.
#[derive(Debug, Default)]
pub struct Answer {
    /// Its text (kept when asked).
    pub text: Option<String>,
    /// The tool calls it made.
    pub tool_calls: Vec<ToolCall>,
}

/// Sends a chat request and reads the answer into `rec`: its text (when `how.keep_text`) and
/// its tool calls.
pub async fn answer(
    via: &mut Via<'_>,
    req: Request<Full<Bytes>>,
    rec: &mut RequestRecord,
    t0: Instant,
    how: Call,
) -> Answer {
    let mut st = if how.keep_text {
        StreamState::keeping_text()
    } else {
        StreamState::default()
    };
    read_answer(via, req, rec, t0, how, &mut st).await;
    Answer {
        text: st.text,
        tool_calls: st.tool_calls,
    }
}

/// Sends a chat/completions request and reads the answer into `rec`; the answer's text when
/// `how.keep_text`.
pub async fn call(
    via: &mut Via<'_>,
    req: Request<Full<Bytes>>,
    rec: &mut RequestRecord,
    t0: Instant,
    how: Call,
) -> Option<String> {
    let mut st = if how.keep_text {
        StreamState::keeping_text()
    } else {
        StreamState::default()
    };
    read_answer(via, req, rec, t0, how, &mut st).await;
    st.text
}

async fn read_answer(
    via: &mut Via<'_>,
    req: Request<Full<Bytes>>,
    rec: &mut RequestRecord,
    t0: Instant,
    how: Call,
    st: &mut StreamState,
) {
    let Call {
        stream,
        abort_after_first,
        ..
    } = how;
    let Ok(resp) = send(via, req, rec, t0).await else {
        return;
    };
    let status = resp.status();
    if !status.is_success() {
        if let Some(body) = read_body(resp, rec, t0).await {
            rec.end_us = us_since(t0);
            fail_status(rec, status.as_u16(), &body);
        }
        return;
    }
    if !stream {
        let Some(body) = read_body(resp, rec, t0).await else {
            return;
        };
        rec.end_us = us_since(t0);
        match serde_json::from_slice::<Value>(&body) {
            Ok(v) if v.get("error").is_some_and(|e| !e.is_null()) => {
                rec.fail(ErrorClass::ServerErrorEvent, v["error"].to_string());
            }
            Ok(v) => {
                st.absorb(&v, None);
                st.fill(rec);
            }
            Err(e) => rec.fail(
                ErrorClass::MalformedStream,
                format!("answer is not JSON: {e}"),
            ),
        }
        return;
    }
    let mut body = resp.into_body();
    loop {
        match body.frame().await {
            None => break,
            Some(Err(e)) => {
                st.fill(rec);
                rec.end_us = us_since(t0);
                rec.fail(
                    ErrorClass::Transport,
                    crate::loadgen::client::error_chain(&e),
                );
                return;
            }
            Some(Ok(frame)) => {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                if let Err((class, msg)) = st.feed(&data, us_since(t0)) {
                    st.fill(rec);
                    rec.end_us = us_since(t0);
                    rec.fail(class, msg);
                    return;
                }
                if abort_after_first && !st.token_us.is_empty() {
                    // Dropping the body closes the connection mid-stream, as a user leaving would.
                    st.fill(rec);
                    rec.end_us = us_since(t0);
                    rec.fail(
                        ErrorClass::Aborted,
                        "client closed the stream after the first token (chaos)",
                    );
                    return;
                }
            }
        }
    }
    rec.end_us = us_since(t0);
    st.fill(rec);
    if let Err((class, msg)) = st.finish() {
        rec.fail(class, msg);
    }
}

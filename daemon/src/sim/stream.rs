//! Response bodies fed by a request's events (the engine's channel, or the `fixed` profile's
//! schedule): SSE for `stream: true`, and the collector for plain responses. Dropping either
//! (client gone) aborts the request in the engine, which frees its KV blocks.

use std::{
    convert::Infallible,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use bytes::Bytes;
use hyper::body::{Body, Frame};
use tokio::sync::mpsc::UnboundedReceiver;

use super::{
    engine::{Engine, Event},
    fixed::Schedule,
    format::Format,
    openai::ApiError,
    sampler::Sampled,
    scheduler::{FinishReason, SeqId},
};

/// Aborts the request in the engine when dropped before it finished.
#[derive(Debug)]
pub struct AbortGuard {
    engine: Option<(Arc<Engine>, SeqId)>,
}

impl AbortGuard {
    /// Guards `id` (no engine in `fixed` mode: the generator task notices the closed channel).
    #[must_use]
    pub fn new(engine: Option<Arc<Engine>>, id: SeqId) -> Self {
        Self {
            engine: engine.map(|e| (e, id)),
        }
    }

    fn disarm(&mut self) {
        self.engine = None;
    }
}

impl Drop for AbortGuard {
    fn drop(&mut self) {
        if let Some((e, id)) = self.engine.take() {
            e.abort(id);
        }
    }
}

/// Name of a finish reason on the wire.
#[must_use]
/// Where a request's events come from.
#[derive(Debug)]
pub enum Source {
    /// The engine's channel for this request.
    Engine(UnboundedReceiver<Event>),
    /// The `fixed` profile's deadlines, polled in place.
    Fixed(Box<Schedule>),
}

impl Source {
    /// The next event when it is ready; `None` when the source is gone or done.
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        match self {
            Source::Engine(rx) => rx.poll_recv(cx),
            Source::Fixed(s) => s.poll_next(cx),
        }
    }
}

/// An SSE body.
#[derive(Debug)]
pub struct SseBody {
    src: Source,
    fmt: Format,
    start: Option<String>,
    offset: usize,
    sent: usize,
    done: bool,
    guard: AbortGuard,
}

impl SseBody {
    /// A stream of `src`'s events formatted by `fmt`.
    #[must_use]
    pub fn new(src: Source, fmt: Format, guard: AbortGuard) -> Self {
        Self {
            start: fmt.sse_start(),
            src,
            fmt,
            offset: 0,
            sent: 0,
            done: false,
            guard,
        }
    }
}

impl Body for SseBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(None);
        }
        let mut out = this.start.take().unwrap_or_default();
        // Send everything that is ready in one frame: fewer writes at high token rates.
        while let Poll::Ready(ev) = this.src.poll_next(cx) {
            match ev {
                Some(Event::Token(t)) => {
                    this.fmt.sse_token(&mut out, &t, this.offset, this.sent);
                    this.offset += t.text.len();
                    this.sent += 1;
                }
                Some(Event::Finished {
                    reason,
                    prompt_tokens,
                    completion_tokens,
                }) => {
                    out.push_str(&this.fmt.sse_end(
                        reason.as_str(),
                        prompt_tokens,
                        completion_tokens,
                    ));
                    this.done = true;
                    this.guard.disarm();
                    break;
                }
                Some(Event::Failed(msg)) => {
                    let e = ApiError::new(hyper::StatusCode::INTERNAL_SERVER_ERROR, msg);
                    out.push_str(&Format::sse_error(&e));
                    this.done = true;
                    this.guard.disarm();
                    break;
                }
                None => {
                    let e = ApiError::new(hyper::StatusCode::SERVICE_UNAVAILABLE, "engine stopped");
                    out.push_str(&Format::sse_error(&e));
                    this.done = true;
                    break;
                }
            }
        }
        if out.is_empty() {
            Poll::Pending
        } else {
            Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))))
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.start.is_none()
    }
}

/// Outcome of a non-streaming request.
#[derive(Debug)]
pub enum Collected {
    /// All tokens and the finish.
    Done {
        /// Tokens.
        tokens: Vec<Sampled>,
        /// Why it ended.
        reason: FinishReason,
        /// Prompt tokens.
        prompt_tokens: usize,
    },
    /// Failed.
    Failed(ApiError),
}

/// Waits for the whole completion.
pub async fn collect(mut src: Source, mut guard: AbortGuard) -> Collected {
    let mut tokens = Vec::new();
    loop {
        match std::future::poll_fn(|cx| src.poll_next(cx)).await {
            Some(Event::Token(t)) => tokens.push(t),
            Some(Event::Finished {
                reason,
                prompt_tokens,
                ..
            }) => {
                guard.disarm();
                return Collected::Done {
                    tokens,
                    reason,
                    prompt_tokens,
                };
            }
            Some(Event::Failed(msg)) => {
                guard.disarm();
                return Collected::Failed(ApiError::new(
                    hyper::StatusCode::INTERNAL_SERVER_ERROR,
                    msg,
                ));
            }
            None => {
                return Collected::Failed(ApiError::new(
                    hyper::StatusCode::SERVICE_UNAVAILABLE,
                    "engine stopped",
                ));
            }
        }
    }
}

//! The one resend of a request written into a kept-alive connection the server had already
//! closed: a copy of the request, and whether a failure says the connection ended before any
//! byte of the answer.

use bytes::Bytes;
use http_body_util::Full;
use hyper::Request;

/// The same request again (method, URI, version, headers, body).
pub(super) fn copy_request(req: &Request<Full<Bytes>>) -> Request<Full<Bytes>> {
    let mut copy = Request::new(req.body().clone());
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.version_mut() = req.version();
    *copy.headers_mut() = req.headers().clone();
    copy
}

/// Whether `e` says the connection ended before any byte of the answer: hyper's "connection
/// closed before message completed", a request canceled or a channel closed because the
/// connection went away before it was written, or a reset/broken pipe while it was written.
pub(super) fn closed_before_answer(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(c) = cur {
        if c.downcast_ref::<hyper::Error>()
            .is_some_and(|h| h.is_incomplete_message() || h.is_canceled() || h.is_closed())
        {
            return true;
        }
        if let Some(io) = c.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::ConnectionAborted
            )
        {
            return true;
        }
        cur = c.source();
    }
    false
}

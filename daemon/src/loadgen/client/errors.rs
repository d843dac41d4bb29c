//! The class and text of a failed request: a connect's side (the client's descriptor limit or
//! the server's), and an error's chain of causes in one line.

use crate::dial;
use crate::measure::record::ErrorClass;

/// The class of a failed connect: the client's own descriptor limit, or the server's side.
pub(super) fn connect_class(e: &dial::DialError) -> ErrorClass {
    if e.is_fd_limit() {
        ErrorClass::ClientFdLimit
    } else {
        ErrorClass::Connect
    }
}

/// Whether EMFILE/ENFILE is anywhere in the chain of `e`.
pub(super) fn fd_limit_in(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(c) = cur {
        if let Some(d) = c.downcast_ref::<dial::DialError>()
            && d.is_fd_limit()
        {
            return true;
        }
        if let Some(io) = c.downcast_ref::<std::io::Error>()
            && dial::is_fd_limit(io)
        {
            return true;
        }
        cur = c.source();
    }
    false
}

/// `error: cause: cause` of an error and its sources, on one line, each said once: a cause
/// whose text the line already holds (an error that quotes its source) is not repeated.
#[must_use]
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        let text = c.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        src = c.source();
    }
    s
}

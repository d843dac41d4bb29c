//! Bearer-token checking. The token is read from a file (a mounted Kubernetes Secret, say) so it
//! never appears in a command line, an environment dump or a log.

use std::path::Path;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::api::ApiError;

/// Shortest token accepted: anything shorter is guessable.
pub const MIN_TOKEN_LEN: usize = 16;

/// A bearer token, compared in constant time. `Debug` does not show it.
#[derive(Clone)]
pub struct Token(Arc<[u8]>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

impl Token {
    /// Reads the token from `path` (surrounding white space ignored).
    pub fn from_file(path: &Path) -> Result<Self, ApiError> {
        let text = std::fs::read_to_string(path).map_err(|e| ApiError::TokenFile {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        Self::new(text.trim()).map_err(|reason| ApiError::TokenFile {
            path: path.display().to_string(),
            reason: reason.to_owned(),
        })
    }

    /// A token from text.
    pub fn new(text: &str) -> Result<Self, &'static str> {
        if text.len() < MIN_TOKEN_LEN {
            return Err("the token is shorter than 16 characters");
        }
        if !text.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("the token must be printable ASCII without spaces");
        }
        Ok(Self(text.as_bytes().into()))
    }

    fn matches(&self, presented: &[u8]) -> bool {
        // Constant time in the content: the length is not a secret worth hiding.
        presented.len() == self.0.len()
            && presented
                .iter()
                .zip(self.0.iter())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }
}

/// Refuses one token for both scraping (`--metrics-token-file`) and launching load
/// (`--api-token-file`): whoever may read `/metrics` must not be able to start runs. Reads
/// both files; either may be absent.
pub fn check_distinct(metrics: Option<&Path>, control: Option<&Path>) -> Result<(), ApiError> {
    let (Some(m), Some(c)) = (metrics, control) else {
        return Ok(());
    };
    if Token::from_file(m)?.matches(&Token::from_file(c)?.0) {
        return Err(ApiError::TokenFile {
            path: c.display().to_string(),
            reason: format!(
                "holds the same token as the metrics token file {}: give the control API a token of its own",
                m.display()
            ),
        });
    }
    Ok(())
}

/// Middleware: 401 unless `Authorization: Bearer <token>` matches. Reusable for `/metrics`:
/// `router.layer(axum::middleware::from_fn_with_state(token, require_token))`.
pub async fn require_token(State(token): State<Token>, req: Request, next: Next) -> Response {
    let ok = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
        .is_some_and(|t| token.matches(t));
    if ok {
        next.run(req).await
    } else {
        let mut resp =
            (StatusCode::UNAUTHORIZED, "missing or wrong bearer token\n").into_response();
        resp.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_checked_and_not_printed() {
        assert!(Token::new("short").is_err());
        assert!(Token::new("has a space in it, long enough").is_err());
        let t = Token::new("0123456789abcdef").unwrap();
        assert!(t.matches(b"0123456789abcdef"));
        assert!(!t.matches(b"0123456789abcdeX"));
        assert!(!t.matches(b"0123456789abcdef0"));
        assert_eq!(format!("{t:?}"), "Token(<redacted>)");
    }

    #[test]
    fn scraping_and_control_need_different_tokens() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, c) = (
            dir.path().join("a"),
            dir.path().join("b"),
            dir.path().join("c"),
        );
        std::fs::write(&a, "0123456789abcdef\n").unwrap();
        std::fs::write(&b, "0123456789abcdef").unwrap();
        std::fs::write(&c, "fedcba9876543210").unwrap();
        let e = check_distinct(Some(&a), Some(&b)).unwrap_err().to_string();
        assert!(e.contains("token of its own"), "{e}");
        check_distinct(Some(&a), Some(&c)).unwrap();
        check_distinct(Some(&a), None).unwrap();
        check_distinct(None, Some(&c)).unwrap();
    }
}

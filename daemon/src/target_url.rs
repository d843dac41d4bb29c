//! A run's target, parsed once where the scenario is read (`target:` or `--target`): scheme,
//! host, port, base URL and whether a [`Reach`] admits it. Everything after (the run's
//! guardrail, the model list, the engine probe, the server's processes, the metrics URL, span
//! labels, the control API's refusal) reads these parts; nothing parses the text again. The
//! connection guard enforces the same reach at dial time ([`crate::dial`]).

use std::fmt;

use hyper::{Uri, http::uri::Authority};
use serde::{Deserialize, Deserializer};

use crate::dial::{OutOfReach, Reach};

/// An absolute `http://` or `https://` URL, as written and in parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetUrl {
    text: String,
    https: bool,
    authority: Authority,
    /// Without the brackets of an IPv6 address.
    host: String,
    port: u16,
}

/// A target URL that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetUrlError {
    /// Not an absolute `http://host:port` URL.
    #[error("bad target URL {0:?}: write e.g. http://127.0.0.1:8000")]
    Url(String),
    /// A scheme other than `http` and `https`.
    #[error("target {0:?}: write an http:// or https:// URL")]
    Scheme(String),
}

impl TargetUrl {
    /// Reads `text` (surrounding spaces ignored).
    pub fn parse(text: &str) -> Result<Self, TargetUrlError> {
        let text = text.trim();
        let bad = || TargetUrlError::Url(text.to_owned());
        let uri: Uri = text.parse().map_err(|_| bad())?;
        let https = match uri.scheme_str().ok_or_else(bad)? {
            "http" => false,
            "https" => true,
            _ => return Err(TargetUrlError::Scheme(text.to_owned())),
        };
        let authority = uri.authority().ok_or_else(bad)?.clone();
        let host = authority.host().trim_matches(['[', ']']).to_owned();
        if host.is_empty() {
            return Err(bad());
        }
        let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
        Ok(Self {
            text: text.to_owned(),
            https,
            authority,
            host,
            port,
        })
    }

    /// The URL as written.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether it is `https://`.
    #[must_use]
    pub fn is_https(&self) -> bool {
        self.https
    }

    /// `host[:port]` as written (an IPv6 host in brackets).
    #[must_use]
    pub fn authority(&self) -> &Authority {
        &self.authority
    }

    /// The host, without the brackets of an IPv6 address.
    #[must_use]
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port (80 or 443 when the URL names none).
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `scheme://authority`: the server's root, where `/v1/models` and `/metrics` live.
    #[must_use]
    pub fn base(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}", self.authority)
    }

    /// The URL as written without a trailing `/`, to append a path to.
    #[must_use]
    pub fn trimmed(&self) -> &str {
        self.text.trim_end_matches('/')
    }

    /// Whether `reach` admits this target ([`Reach::admits`]: its host is loopback, or any
    /// host may be reached): the one check a run, a posted run and the model list make before
    /// sending anything. The refusal carries the URL as written.
    pub fn within(&self, reach: Reach) -> Result<(), OutOfReach> {
        reach.admits(&self.host, &self.text)
    }
}

impl fmt::Display for TargetUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::str::FromStr for TargetUrl {
    type Err = TargetUrlError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl<'de> Deserialize<'de> for TargetUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Self::parse(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_of_a_target() {
        let t = TargetUrl::parse(" http://127.0.0.1:8000/v1/ ").unwrap();
        assert_eq!(
            (t.as_str(), t.host(), t.port(), t.is_https()),
            ("http://127.0.0.1:8000/v1/", "127.0.0.1", 8000, false)
        );
        assert_eq!(t.base(), "http://127.0.0.1:8000");
        assert_eq!(t.trimmed(), "http://127.0.0.1:8000/v1");
        assert_eq!(t.within(Reach::Loopback), Ok(()));
        let v6 = TargetUrl::parse("https://[::1]").unwrap();
        assert_eq!((v6.host(), v6.port()), ("::1", 443));
        assert_eq!(v6.base(), "https://[::1]");
        assert_eq!(v6.within(Reach::Loopback), Ok(()));
        let remote = TargetUrl::parse("http://vllm/").unwrap();
        assert_eq!(remote.port(), 80);
        assert_eq!(
            remote.within(Reach::Loopback),
            Err(OutOfReach {
                url: "http://vllm/".into()
            })
        );
        assert_eq!(remote.within(Reach::Anywhere), Ok(()));
        assert!(
            TargetUrl::parse("http://localhost:9")
                .unwrap()
                .within(Reach::Loopback)
                .is_ok()
        );
    }

    #[test]
    fn what_is_not_a_target_says_how_to_write_one() {
        for bad in ["", "127.0.0.1:8000", "/v1", "http://", "not a url"] {
            let e = TargetUrl::parse(bad).unwrap_err();
            assert!(e.to_string().contains("write e.g. http://"), "{bad}: {e}");
        }
        assert_eq!(
            TargetUrl::parse("ftp://vllm"),
            Err(TargetUrlError::Scheme("ftp://vllm".into()))
        );
    }
}

//! Where requests go: a target's base URL, headers and TLS configuration, and the URIs and
//! requests built on it.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Uri, header::HeaderValue};

use crate::{
    target_url::{TargetUrl, TargetUrlError},
    tls::{TlsError, TlsOptions},
};

/// Where requests go: scheme and authority of the target, its TLS configuration
/// (`https://`), plus default headers.
#[derive(Debug, Clone)]
pub struct Target {
    pub(super) https: bool,
    pub(super) authority: hyper::http::uri::Authority,
    pub(super) host: String,
    pub(super) port: u16,
    pub(super) headers: Vec<(hyper::header::HeaderName, HeaderValue)>,
    pub(super) tls: Option<Arc<rustls::ClientConfig>>,
}

/// A target that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// Not an absolute `http://` or `https://` URL.
    #[error(transparent)]
    Url(#[from] TargetUrlError),
    /// The TLS configuration of an `https://` target cannot be built.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// A pipeline step's URL with another scheme than the target's.
    #[error(
        "pipeline service {0:?}: use the target's scheme (all http:// or all https://) for every service of a pipeline"
    )]
    MixedScheme(String),
    /// A header name or value is not valid HTTP.
    #[error("bad header {0:?}")]
    Header(String),
    /// A request path that is not an absolute path (it could name another host).
    #[error("bad path {0:?}: a path must start with `/`, e.g. /v1/chat/completions")]
    Path(String),
}

/// Checks a request path: absolute (`/...`) and valid in a request line. A path such as
/// `@host/` would otherwise turn the target into userinfo when glued to the base URL.
pub fn check_path(path: &str) -> Result<hyper::http::uri::PathAndQuery, TargetError> {
    if !path.starts_with('/') || path.starts_with("//") {
        return Err(TargetError::Path(path.into()));
    }
    path.parse().map_err(|_| TargetError::Path(path.into()))
}

impl Target {
    /// Parses the base URL (a pipeline step's, a test's) and takes the default headers.
    pub fn new<'a>(
        url: &str,
        headers: impl IntoIterator<Item = (&'a String, &'a String)>,
    ) -> Result<Self, TargetError> {
        Self::of(&TargetUrl::parse(url)?, headers)
    }

    /// The scenario's target, parsed when the scenario was read, with the default headers.
    pub fn of<'a>(
        url: &TargetUrl,
        headers: impl IntoIterator<Item = (&'a String, &'a String)>,
    ) -> Result<Self, TargetError> {
        let headers = headers
            .into_iter()
            .map(|(k, v)| {
                Ok((
                    k.parse().map_err(|_| TargetError::Header(k.clone()))?,
                    v.parse().map_err(|_| TargetError::Header(k.clone()))?,
                ))
            })
            .collect::<Result<_, TargetError>>()?;
        Ok(Target {
            https: url.is_https(),
            authority: url.authority().clone(),
            // As in the URL (an IPv6 host in brackets): errors and TLS names strip them.
            host: url.authority().host().to_owned(),
            port: url.port(),
            headers,
            tls: None,
        })
    }

    /// The same target with the TLS configuration `opts` describe, built when the target is
    /// `https://` (a plain target needs none and reads no file).
    pub fn with_tls(mut self, opts: &TlsOptions) -> Result<Self, TargetError> {
        if self.https {
            self.tls = Some(opts.client_config()?);
        }
        Ok(self)
    }

    /// The same headers and TLS configuration at another base URL: a pipeline step's service.
    /// It must use the target's scheme (the run's client holds the target's TLS settings).
    pub fn at(&self, url: &str) -> Result<Self, TargetError> {
        let mut t = Target::new(url, std::iter::empty())?;
        if t.https != self.https {
            return Err(TargetError::MixedScheme(url.into()));
        }
        t.headers.clone_from(&self.headers);
        t.tls.clone_from(&self.tls);
        Ok(t)
    }

    /// The host of the base URL (no brackets around an IPv6 address).
    #[must_use]
    pub fn host(&self) -> &str {
        self.host.trim_start_matches('[').trim_end_matches(']')
    }

    /// Whether the target is `https://`.
    #[must_use]
    pub fn is_https(&self) -> bool {
        self.https
    }

    /// The path part of the URL, when one was given (`/` counts as none).
    #[must_use]
    pub fn url_path(url: &str) -> Option<String> {
        let uri: Uri = url.parse().ok()?;
        let p = uri.path_and_query()?.as_str();
        (p != "/" && !p.is_empty()).then(|| p.to_string())
    }

    /// The absolute URI of `path`, built from parts so that the path can never change
    /// the authority.
    pub fn uri(&self, path: &str) -> Result<Uri, TargetError> {
        Uri::builder()
            .scheme(if self.https { "https" } else { "http" })
            .authority(self.authority.clone())
            .path_and_query(check_path(path)?)
            .build()
            .map_err(|_| TargetError::Path(path.into()))
    }

    /// Builds a request to `path` with the default and extra headers.
    pub fn request(
        &self,
        method: &Method,
        path: &str,
        body: Bytes,
        extra: &[(hyper::header::HeaderName, HeaderValue)],
    ) -> Result<Request<Full<Bytes>>, TargetError> {
        Ok(self.request_to(method, self.uri(path)?, body, extra))
    }

    /// Builds a request to a prepared URI (saves parsing it per request).
    pub fn request_to(
        &self,
        method: &Method,
        uri: Uri,
        body: Bytes,
        extra: &[(hyper::header::HeaderName, HeaderValue)],
    ) -> Request<Full<Bytes>> {
        let has_body = !body.is_empty();
        let mut req = Request::new(Full::new(body));
        *req.method_mut() = method.clone();
        *req.uri_mut() = uri;
        let h = req.headers_mut();
        if has_body {
            h.insert(
                hyper::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
        }
        for (k, v) in self.headers.iter().chain(extra) {
            h.insert(k.clone(), v.clone());
        }
        req
    }
}

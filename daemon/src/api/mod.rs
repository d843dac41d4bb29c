//! The control API: start, follow and stop load-generator runs on this node, and let external
//! load generators mark the phases of their runs.
//!
//! | route | body | answer |
//! |---|---|---|
//! | `POST /api/v1/runs` | scenario file (YAML text) | 201 `{"id", "status"}`; 400 `file:line:col: what` |
//! | `GET /api/v1/runs/{id}` | | `{"status", "report"}` |
//! | `POST /api/v1/runs/{id}/stop` | | `{"status"}` |
//! | `POST /api/v1/marks` | `{"phase", "at"?: unix ms, "source"?}` | 201 the mark |
//! | `GET /api/v1/marks` | | all marks |
//!
//! Safe by default: it listens on 127.0.0.1 or a unix socket (mode 0600). Any other address
//! needs a bearer token from a file, or [`Api::bind`] refuses. Bodies are size-limited (413).
//!
//! ```no_run
//! # async fn demo(launcher: std::sync::Arc<dyn inferscope::api::RunLauncher>) {
//! use inferscope::api::{Api, ApiConfig, Marks};
//! let marks = Marks::default(); // the time line reads marks.phase_at(window_start)
//! let api = Api::bind(&ApiConfig::default(), launcher, marks.clone()).await.unwrap();
//! api.serve(std::future::pending()).await.unwrap();
//! # }
//! ```

mod auth;
mod handlers;
pub mod launcher;
pub mod marks;
pub mod node;
pub mod redact;
pub mod runs;
pub mod serve;

use std::future::Future;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use tokio::net::{TcpListener, UnixListener};

pub use crate::node::marks::{Mark, MarkError, Marks};
pub use auth::{MIN_TOKEN_LEN, Token, check_distinct, require_token};
pub use launcher::LoadgenLauncher;
pub use marks::MarkingLauncher;
pub use runs::{LaunchError, RunHandle, RunLauncher, RunState, RunStatus};

/// Where the API listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bind {
    /// A TCP address; anything but loopback needs a token.
    Tcp(SocketAddr),
    /// A unix socket path; access is by file permissions (0600).
    Unix(PathBuf),
}

impl std::fmt::Display for Bind {
    /// The form `from_str` reads.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Tcp(a) => write!(f, "{a}"),
            Self::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

impl std::str::FromStr for Bind {
    type Err = ApiError;

    /// `unix:/run/inferscope.sock`, or `HOST:PORT`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(path) = s.strip_prefix("unix:") {
            return Ok(Self::Unix(PathBuf::from(path)));
        }
        s.parse()
            .map(Self::Tcp)
            .map_err(|_| ApiError::BadBind(s.to_owned()))
    }
}

/// How to run the API.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// Where to listen; default `127.0.0.1:7070`.
    pub bind: Bind,
    /// File holding the bearer token; required for a non-loopback bind, enforced whenever set.
    pub token_file: Option<PathBuf>,
    /// Largest scenario body, bytes; default 256 KiB.
    pub scenario_limit: usize,
    /// Largest mark body, bytes; default 4 KiB.
    pub mark_limit: usize,
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            bind: Bind::Tcp(SocketAddr::from(([127, 0, 0, 1], 7070))),
            token_file: None,
            scenario_limit: 256 * 1024,
            mark_limit: 4 * 1024,
        }
    }
}

/// Errors of the control API.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// A non-loopback bind without a token.
    #[error(
        "refusing to serve the control API on {0} without a bearer token: pass --api-token-file FILE, or bind 127.0.0.1 or unix:PATH"
    )]
    TokenRequired(SocketAddr),
    /// The token file is unreadable or unfit.
    #[error("API token file {path}: {reason}")]
    TokenFile {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// Not `HOST:PORT` or `unix:PATH`.
    #[error("API bind {0:?} is neither HOST:PORT nor unix:PATH")]
    BadBind(String),
    /// Binding or serving failed.
    #[error("control API on {addr}: {source}")]
    Io {
        /// Where.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
}

enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

/// A bound, not yet serving, API.
pub struct Api {
    listener: Listener,
    router: Router,
}

impl Api {
    /// Checks the bind policy, reads the token, and binds. Fails before binding when a
    /// non-loopback address has no token.
    pub async fn bind(
        config: &ApiConfig,
        launcher: Arc<dyn RunLauncher>,
        marks: Marks,
    ) -> Result<Self, ApiError> {
        let token = config
            .token_file
            .as_deref()
            .map(Token::from_file)
            .transpose()?;
        if let Bind::Tcp(addr) = &config.bind
            && !addr.ip().is_loopback()
            && token.is_none()
        {
            return Err(ApiError::TokenRequired(*addr));
        }
        let state = Arc::new(handlers::AppState { launcher, marks });
        let mut router = handlers::routes(state, config.scenario_limit, config.mark_limit);
        if let Some(token) = token {
            router = router.layer(axum::middleware::from_fn_with_state(
                token,
                auth::require_token,
            ));
        }
        let listener =
            match &config.bind {
                Bind::Tcp(addr) => Listener::Tcp(TcpListener::bind(addr).await.map_err(
                    |source| ApiError::Io {
                        addr: addr.to_string(),
                        source,
                    },
                )?),
                Bind::Unix(path) => {
                    let io = |source| ApiError::Io {
                        addr: path.display().to_string(),
                        source,
                    };
                    // A stale socket from a killed daemon would make bind fail with EADDRINUSE.
                    if std::fs::symlink_metadata(path)
                        .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()))
                    {
                        std::fs::remove_file(path).map_err(io)?;
                    }
                    let l = UnixListener::bind(path).map_err(io)?;
                    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                        .map_err(io)?;
                    Listener::Unix(l)
                }
            };
        Ok(Self { listener, router })
    }

    /// The TCP address bound (useful with port 0); `None` for a unix socket.
    #[must_use]
    pub fn local_addr(&self) -> Option<SocketAddr> {
        match &self.listener {
            Listener::Tcp(l) => l.local_addr().ok(),
            Listener::Unix(_) => None,
        }
    }

    /// Serves until `shutdown` completes, under [`serve::Limits::default`] (header and request
    /// deadlines, a connection cap).
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ApiError> {
        let io = |source| ApiError::Io {
            addr: "listener".into(),
            source,
        };
        let limits = serve::Limits::default();
        match self.listener {
            Listener::Tcp(l) => serve::serve(l, self.router, limits, shutdown).await,
            Listener::Unix(l) => serve::serve(l, self.router, limits, shutdown).await,
        }
        .map_err(io)
    }
}

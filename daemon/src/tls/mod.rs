//! TLS for inferscope's HTTP clients (the load generator, the `/metrics` scraper, model
//! discovery) and for the simulated server: rustls with the ring provider, HTTP/1.1 only.
//!
//! A client trusts the system's roots (`rustls-native-certs`) plus the PEM roots of
//! `--ca-file`; `--insecure` accepts any certificate. The server name (SNI, and the name the
//! certificate must carry) is always the URL's host. [`TlsOptions`] is what the flags say;
//! [`TlsOptions::client_config`] turns it into the rustls configuration a connector uses.
//!
//! ```no_run
//! # fn demo() -> Result<(), inferscope::tls::TlsError> {
//! use inferscope::tls::TlsOptions;
//! let opts = TlsOptions { ca_file: Some("ca.pem".into()), insecure: false };
//! let config = opts.client_config()?; // system roots + ca.pem
//! # let _ = config; Ok(()) }
//! ```

pub mod connector;
pub mod insecure;
pub mod server;
pub mod stream;

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use rustls::{
    ClientConfig, RootCertStore,
    crypto::CryptoProvider,
    pki_types::{CertificateDer, pem::PemObject as _},
};

pub use connector::{ConnectError, TlsConnector};
pub use stream::{HandshakeError, Stream};

/// The only application protocol spoken over TLS (the load generator is HTTP/1.1 throughout).
pub const ALPN_HTTP1: &[u8] = b"http/1.1";

/// How a client decides whether to trust a server's certificate (the `--ca-file` and
/// `--insecure` flags). The default trusts the system's roots only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// PEM file of CA certificates trusted besides the system's.
    pub ca_file: Option<PathBuf>,
    /// Accept any certificate, for self-signed test servers: nothing is verified.
    pub insecure: bool,
}

/// A TLS configuration that cannot be built. Every message is one line that says what to do.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// `--ca-file` cannot be read or holds no certificate.
    #[error("--ca-file {}: {reason}", path.display())]
    CaFile {
        /// The file as given.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// No system root could be loaded and no `--ca-file` was given.
    #[error(
        "no system CA certificates could be loaded ({reason}): install the ca-certificates package, set SSL_CERT_FILE, or pass --ca-file PEM (or --insecure for a test server)"
    )]
    NoRoots {
        /// Why (the loader's first error, or "none found").
        reason: String,
    },
    /// A server certificate or key file (the sim's `--tls-cert`/`--tls-key`) is unusable.
    #[error("{flag} {}: {reason}", path.display())]
    ServerFile {
        /// The flag that named the file.
        flag: &'static str,
        /// The file as given.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// rustls refused the assembled configuration.
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// The crypto provider every configuration uses: ring (no C toolchain needed), whatever
/// other provider some dependency may have compiled in.
#[must_use]
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl TlsOptions {
    /// The client configuration these options describe: the system's roots plus `ca_file`,
    /// or no verification at all with `insecure`. Reads files; call it once per run, not per
    /// connection.
    pub fn client_config(&self) -> Result<Arc<ClientConfig>, TlsError> {
        let provider = provider();
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?;
        let mut config = if self.insecure {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(insecure::AcceptAny::new(provider)))
                .with_no_client_auth()
        } else {
            builder
                .with_root_certificates(self.roots()?)
                .with_no_client_auth()
        };
        config.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
        Ok(Arc::new(config))
    }

    /// The system's roots plus `ca_file`'s; an error when there are none at all.
    fn roots(&self) -> Result<RootCertStore, TlsError> {
        let mut roots = RootCertStore::empty();
        let extra = match &self.ca_file {
            Some(path) => {
                let certs = read_ca_file(path)?;
                let (added, _) = roots.add_parsable_certificates(certs);
                if added == 0 {
                    return Err(TlsError::CaFile {
                        path: path.clone(),
                        reason: "no usable CA certificate in it".into(),
                    });
                }
                added
            }
            None => 0,
        };
        let native = rustls_native_certs::load_native_certs();
        for e in &native.errors {
            tracing::debug!("system CA certificates: {e}");
        }
        let (system, _) = roots.add_parsable_certificates(native.certs);
        if system == 0 && extra == 0 {
            let reason = native
                .errors
                .first()
                .map_or_else(|| "none found".to_string(), ToString::to_string);
            return Err(TlsError::NoRoots {
                reason: reason.replace('\n', " "),
            });
        }
        Ok(roots)
    }
}

/// Every certificate of a PEM file; an error when it cannot be read or has none.
fn read_ca_file(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let err = |reason: String| TlsError::CaFile {
        path: path.to_path_buf(),
        reason,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| err(pem_reason(&e)))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err(pem_reason(&e)))?;
    if certs.is_empty() {
        return Err(err(
            "no CERTIFICATE block in it (give the CA's certificate in PEM form)".into(),
        ));
    }
    Ok(certs)
}

/// A PEM reading error, on one line.
pub(crate) fn pem_reason(e: &rustls::pki_types::pem::Error) -> String {
    use rustls::pki_types::pem::Error;
    match e {
        Error::Io(io) => io.to_string(),
        other => format!("not PEM: {}", other.to_string().replace('\n', " ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_empty_ca_file_is_one_line_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.pem");
        let opts = TlsOptions {
            ca_file: Some(missing.clone()),
            insecure: false,
        };
        let e = opts.client_config().unwrap_err().to_string();
        assert!(e.starts_with("--ca-file "), "{e}");
        assert!(e.contains("nope.pem"), "{e}");
        assert!(!e.contains('\n'), "{e}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "hello\n").unwrap();
        let e = TlsOptions {
            ca_file: Some(empty),
            insecure: false,
        }
        .client_config()
        .unwrap_err()
        .to_string();
        assert!(e.contains("no CERTIFICATE block"), "{e}");
    }

    #[test]
    fn insecure_needs_no_roots_and_speaks_http1() {
        let c = TlsOptions {
            ca_file: None,
            insecure: true,
        }
        .client_config()
        .unwrap();
        assert_eq!(c.alpn_protocols, vec![ALPN_HTTP1.to_vec()]);
    }
}

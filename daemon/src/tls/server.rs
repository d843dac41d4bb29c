//! The server side, for `inferscope sim --tls-cert FILE --tls-key FILE`: a rustls server
//! configuration from a PEM certificate chain and its PEM private key.

use std::{path::Path, sync::Arc};

use rustls::{
    ServerConfig,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject as _},
};

use super::{ALPN_HTTP1, TlsError, pem_reason, provider};

/// A server configuration serving the chain in `cert` (leaf first) with the key in `key`,
/// HTTP/1.1 only, no client certificates.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, TlsError> {
    let file_err = |flag: &'static str, path: &Path, reason: String| TlsError::ServerFile {
        flag,
        path: path.to_path_buf(),
        reason,
    };
    let chain = CertificateDer::pem_file_iter(cert)
        .map_err(|e| file_err("--tls-cert", cert, pem_reason(&e)))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_err("--tls-cert", cert, pem_reason(&e)))?;
    if chain.is_empty() {
        return Err(file_err(
            "--tls-cert",
            cert,
            "no CERTIFICATE block in it (give the server's certificate chain in PEM form)".into(),
        ));
    }
    let private = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        let reason = match e {
            rustls::pki_types::pem::Error::NoItemsFound => {
                "no PRIVATE KEY block in it (give the certificate's key in PEM form)".into()
            }
            other => pem_reason(&other),
        };
        file_err("--tls-key", key, reason)
    })?;
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .map_err(|e| {
            file_err(
                "--tls-key",
                key,
                format!("does not fit the certificate in {}: {e}", cert.display()),
            )
        })?;
    config.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
    Ok(Arc::new(config))
}

//! The client TLS flags shared by `stress` (targets, `--explain`'s scraper) and `daemon`
//! (`--metrics-url`, runs posted to the control API): `--ca-file PEM` and `--insecure`.

use std::path::PathBuf;

use inferscope::tls::TlsOptions;

/// The warning printed (stress) or logged (daemon) once when `--insecure` is on.
pub const INSECURE_WARNING: &str = "WARNING: --insecure: TLS certificates are NOT verified; anyone between here and the server can read and change this traffic";

/// `--ca-file` and `--insecure`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TlsArgs {
    /// Trust the CA certificates in this PEM file, besides the system's, for https:// URLs.
    #[arg(long, value_name = "PEM")]
    ca_file: Option<PathBuf>,
    /// Accept any TLS certificate for https:// URLs (self-signed test servers): nothing is
    /// verified.
    #[arg(long, conflicts_with = "ca_file")]
    insecure: bool,
}

impl TlsArgs {
    /// The options; a `--ca-file` is read now, so a bad one fails before anything starts.
    pub fn options(&self) -> anyhow::Result<TlsOptions> {
        let opts = TlsOptions {
            ca_file: self.ca_file.clone(),
            insecure: self.insecure,
        };
        if opts.ca_file.is_some() {
            opts.client_config()?;
        }
        Ok(opts)
    }

    /// Whether `--insecure` was given (the caller warns).
    pub fn insecure(&self) -> bool {
        self.insecure
    }
}

//! Logs to stderr through `tracing-subscriber`: `RUST_LOG` filters (default per subcommand),
//! `--log-format` picks one line of text or one JSON object per event.

use clap::ValueEnum;

/// The shape of a log line.
#[derive(Clone, Copy, Debug, Default, ValueEnum)]
pub enum LogFormat {
    /// `TIME LEVEL target: message key=value`.
    #[default]
    Text,
    /// One JSON object per line (`timestamp`, `level`, `target`, `fields.message`, ...), for log
    /// shippers.
    Json,
}

/// Installs the subscriber. `default` is the filter when `RUST_LOG` is unset or unparsable (a
/// bad `RUST_LOG` is said once on stderr, not fatal).
pub fn init(format: LogFormat, default: &str) {
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => tracing_subscriber::EnvFilter::try_new(&spec)
            .unwrap_or_else(|e| {
                eprintln!("inferscope: RUST_LOG={spec:?} is not a filter ({e}); using {default:?}");
                tracing_subscriber::EnvFilter::new(default)
            }),
        _ => tracing_subscriber::EnvFilter::new(default),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false);
    // Err only when a subscriber is installed already: keep that one.
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

//! One module per subcommand: argument struct (`Args`) and `run(&Args) -> anyhow::Result<ExitCode>`.
pub mod args;
pub mod completions;
pub mod daemon;
pub mod explain;
pub mod find_max;
pub mod html;
pub mod live_otlp;
pub mod logging;
pub mod otlp;
pub mod report;
pub mod runqlat;
pub mod sim;
pub mod stress;
pub mod tls;
pub mod triggers;
pub mod workload;

//! One module per subcommand: argument struct (`Args`) and `run(&Args) -> anyhow::Result<ExitCode>`.
pub mod runqlat;
pub mod stress;

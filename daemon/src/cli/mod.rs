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

/// `err` and its causes on one line, each cause said once (an error whose message already
/// quotes its cause is not followed by that cause again).
pub fn one_line(err: &anyhow::Error) -> String {
    inferscope::loadgen::client::error_chain(err.as_ref())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_cause_already_in_the_message_is_not_said_again() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file");
        let err = anyhow::Error::from(inferscope::api::ApiError::Io {
            addr: "x".into(),
            source: io,
        })
        .context("starting the daemon");
        assert_eq!(
            super::one_line(&err),
            "starting the daemon: control API on x: No such file"
        );
        let plain = anyhow::anyhow!("inner").context("outer");
        assert_eq!(super::one_line(&plain), "outer: inner");
    }
}

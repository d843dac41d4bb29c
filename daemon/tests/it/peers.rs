//! Tests that need a peer this machine may lack (root, a Python package): skipped where it is
//! missing, saying why, except under `CI=true`, where a missing peer fails the test: a CI run
//! must not pass by skipping what it was meant to check.

/// Whether this is a CI run (`CI=true`, as `.ci/run` sets it).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// `test` cannot run because `why`: fails under CI, else says it is skipped.
pub fn missing(test: &str, why: &str) {
    assert!(
        !in_ci(),
        "{test}: {why} (CI=true: a missing peer fails the run; `cargo xtask setup` installs the peers)"
    );
    eprintln!("skipping {test}: {why}");
}

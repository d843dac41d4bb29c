//! Dependency hygiene read from the workspace's Cargo.lock: the deprecated `serde_yaml` is
//! gone (`serde_norway`, its maintained fork, reads the YAML), and inferscope's own `rand` is
//! the one the OpenTelemetry SDK already compiles. Two other `rand`s remain, forced by
//! dependencies: 0.8 by linfa 0.8 (`workload build`), 0.10 by `hnsw_rs` 0.3 (the sim's index).

/// `(name, version, dependencies)` of every package in Cargo.lock.
fn packages() -> Vec<(String, String, Vec<String>)> {
    let lock =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.lock")).unwrap();
    lock.split("[[package]]")
        .skip(1)
        .map(|block| {
            let field = |k: &str| {
                block
                    .lines()
                    .find_map(|l| l.strip_prefix(&format!("{k} = \"")))
                    .map(|v| v.trim_end_matches('"').to_owned())
                    .unwrap_or_default()
            };
            let deps = block
                .split("dependencies = [")
                .nth(1)
                .map(|d| {
                    d.split(']')
                        .next()
                        .unwrap_or("")
                        .lines()
                        .map(|l| l.trim().trim_matches(|c| c == '"' || c == ',').to_owned())
                        .filter(|l| !l.is_empty())
                        .collect()
                })
                .unwrap_or_default();
            (field("name"), field("version"), deps)
        })
        .collect()
}

/// The `rand` version `package` depends on (`rand` alone when only one is locked).
fn rand_of(pkgs: &[(String, String, Vec<String>)], package: &str) -> String {
    let (_, _, deps) = pkgs.iter().find(|(n, _, _)| n == package).unwrap();
    deps.iter()
        .find(|d| *d == "rand" || d.starts_with("rand "))
        .unwrap_or_else(|| panic!("{package} does not depend on rand"))
        .clone()
}

#[test]
fn serde_yaml_is_gone_and_our_rand_is_the_otel_sdks() {
    let pkgs = packages();
    assert!(
        pkgs.len() > 100,
        "Cargo.lock not read: {} packages",
        pkgs.len()
    );
    assert!(
        !pkgs.iter().any(|(n, _, _)| n == "serde_yaml"),
        "serde_yaml is deprecated: use serde_norway"
    );
    assert!(pkgs.iter().any(|(n, _, _)| n == "serde_norway"));
    assert_eq!(
        rand_of(&pkgs, "inferscope"),
        rand_of(&pkgs, "opentelemetry_sdk")
    );
    // A rand that no known dependency forces is a new duplicate: say which pulls it.
    let rands: Vec<&String> = pkgs
        .iter()
        .filter(|(n, _, _)| n == "rand")
        .map(|(_, v, _)| v)
        .collect();
    assert!(rands.len() <= 3, "rand versions: {rands:?}");
}

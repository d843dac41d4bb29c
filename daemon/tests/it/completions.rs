//! `inferscope completions SHELL` and the manual pages behind `cargo xtask man`.

#[test]
fn bash_completion_names_the_subcommands_and_their_flags() {
    let out = crate::cli::run(&["completions", "bash"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let script = String::from_utf8(out.stdout).unwrap();
    assert!(
        script.contains("_inferscope()"),
        "not a bash completion function"
    );
    assert!(script.contains("complete -F _inferscope"), "not registered");
    for sub in [
        "stress",
        "sim",
        "daemon",
        "report",
        "workload",
        "completions",
    ] {
        assert!(script.contains(sub), "no {sub}");
    }
    for flag in ["--target", "--otlp-endpoint", "--log-format"] {
        assert!(script.contains(flag), "no {flag}");
    }
    // The hidden page writer is not offered.
    assert!(
        !script.contains("inferscope__man"),
        "hidden `man` completed"
    );
}

#[test]
fn other_shells_and_a_bad_one() {
    for shell in ["zsh", "fish"] {
        let out = crate::cli::run(&["completions", shell]);
        assert!(out.status.success(), "{shell}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("stress"),
            "{shell}"
        );
    }
    let out = crate::cli::run(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("possible values: bash, elvish, fish, powershell, zsh"),
        "{err}"
    );
}

#[test]
fn man_writes_a_page_per_command() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("man");
    let out = crate::cli::run(&["man", "--out", out_dir.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page = std::fs::read_to_string(out_dir.join("inferscope.1")).unwrap();
    assert!(page.starts_with(".ie"), "{}", &page[..80.min(page.len())]);
    assert!(page.contains(".TH inferscope 1"), "no title");
    assert!(
        page.contains("inferscope\\-stress(1)"),
        "no see-also of stress"
    );
    let stress = std::fs::read_to_string(out_dir.join("inferscope-stress.1")).unwrap();
    assert!(
        stress.contains("\\-\\-target"),
        "stress page lacks --target"
    );
    assert!(
        stress.contains("\\-\\-otlp\\-sample"),
        "stress page lacks --otlp-sample"
    );
    for sub in ["sim", "daemon", "report", "completions"] {
        assert!(
            out_dir.join(format!("inferscope-{sub}.1")).exists(),
            "no page for {sub}"
        );
    }
}

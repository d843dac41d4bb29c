//! The sorting of aya-build's output by `daemon/build.rs`: directives pass, the eBPF build's
//! relayed output stays out of cargo's warnings unless the build fails.

#[path = "../../build_relay.rs"]
mod relay;

#[test]
fn directives_pass_notes_stay_the_build_output_is_set_aside() {
    let text = "\
cargo:rerun-if-env-changed=AYA_BUILD_SKIP
cargo:rerun-if-changed=/src/probe-ebpf
cargo:warning=   Compiling core v0.0.0 (/rustlib/src/rust/library/core)
cargo:warning=   Compiling probe-ebpf v0.1.0 (/src/probe-ebpf)
cargo:warning=warning: unused variable: `x`
cargo:warning=    Finished `release` profile [optimized] target(s) in 1m 31s
cargo:warning=which(rustup)=cannot find binary path; proceeding with current toolchain
";
    let s = relay::sort(text);
    assert_eq!(
        s.directives,
        [
            "cargo:rerun-if-env-changed=AYA_BUILD_SKIP",
            "cargo:rerun-if-changed=/src/probe-ebpf"
        ]
    );
    assert_eq!(
        s.notes,
        ["which(rustup)=cannot find binary path; proceeding with current toolchain"]
    );
    assert_eq!(s.relayed.len(), 4);
    assert!(s.relayed[0].starts_with("   Compiling core"));
    assert!(s.relayed.iter().all(|l| !l.starts_with("cargo:")));
}

#[test]
fn the_skip_note_and_the_new_directive_syntax() {
    let s = relay::sort(
        "cargo::rerun-if-changed=x\ncargo:warning=AYA_BUILD_SKIP=1; skipping eBPF build\n",
    );
    assert_eq!(s.directives, ["cargo::rerun-if-changed=x"]);
    assert_eq!(s.notes, ["AYA_BUILD_SKIP=1; skipping eBPF build"]);
    assert!(s.relayed.is_empty());
}

//! What of aya-build's output reaches cargo. aya-build relays the eBPF build's whole cargo
//! output as `cargo:warning=` lines (about 40 `Compiling ...` lines on a cold build, replayed by
//! cargo on every build after): `daemon/build.rs` captures its stdout, and this sorts it.
//! Shared by the build script and its test (`tests/it/build_relay.rs`).

/// aya-build's output, sorted.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Sorted<'a> {
    /// Instructions for cargo (`cargo:rerun-if-changed=...`): always passed on.
    pub directives: Vec<&'a str>,
    /// aya-build's own notes (`AYA_BUILD_SKIP`, no rustup): passed on as warnings.
    pub notes: Vec<&'a str>,
    /// The eBPF build's output: shown only when it fails.
    pub relayed: Vec<&'a str>,
}

/// Sorts the lines aya-build printed.
#[must_use]
pub fn sort(text: &str) -> Sorted<'_> {
    let mut out = Sorted::default();
    for line in text.lines() {
        let warning = line
            .strip_prefix("cargo:warning=")
            .or_else(|| line.strip_prefix("cargo::warning="));
        match warning {
            None if line.starts_with("cargo:") => out.directives.push(line),
            // Not for cargo (nothing else prints here): keep it with the build's output.
            None => out.relayed.push(line),
            Some(w) if is_note(w) => out.notes.push(w),
            Some(w) => out.relayed.push(w),
        }
    }
    out
}

/// aya-build's own warnings, as opposed to the lines it relays from the eBPF build.
fn is_note(w: &str) -> bool {
    w.starts_with("AYA_BUILD_SKIP=") || w.starts_with("which(rustup)=")
}

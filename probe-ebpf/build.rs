//! Rebuild the kernel programs when bpf-linker changes (it is the linker of this crate).
fn main() {
    let bpf_linker = which::which("bpf-linker").expect(
        "bpf-linker not found on PATH: run `cargo xtask setup` (it builds bpf-linker from crates.io)",
    );
    println!("cargo:rerun-if-changed={}", bpf_linker.display());
}

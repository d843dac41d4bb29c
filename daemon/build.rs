//! Builds the kernel programs in `probe-ebpf` for bpfel-unknown-none with the nightly toolchain
//! (build-std) and leaves the object in `OUT_DIR/probe`, which `probes::load` embeds.
use anyhow::Context as _;

fn main() -> anyhow::Result<()> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../probe-ebpf");
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "probe-ebpf",
            root_dir: root,
            ..Default::default()
        }],
        aya_build::Toolchain::default(),
    )
    .context("building the eBPF programs failed; run `cargo xtask setup` (bpf-linker, rust-src)")
}

//! The built `inferscope` binary: `inferscope sim` serves, and the simulated CUDA driver
//! functions are in its symbol table, where uprobes attach by name.

use crate::sim_process;

use sim_process::SimProcess;

/// Names of the defined function symbols in an ELF64 little-endian file's `.symtab`.
fn elf_function_symbols(path: &str) -> Vec<String> {
    let d = std::fs::read(path).unwrap();
    let u16_at = |o: usize| u16::from_le_bytes(d[o..o + 2].try_into().unwrap()) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(d[o..o + 4].try_into().unwrap()) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(d[o..o + 8].try_into().unwrap()) as usize;
    assert_eq!(&d[..4], b"\x7fELF");
    assert_eq!(d[4], 2, "ELF64");
    let (shoff, shentsize, shnum) = (u64_at(0x28), u16_at(0x3a), u16_at(0x3c));
    let sh = |i: usize| shoff + i * shentsize;
    let symtab = (0..shnum)
        .find(|&i| u32_at(sh(i) + 4) == 2)
        .expect("no .symtab: the binary is stripped");
    let (off, size, link, entsize) = (
        u64_at(sh(symtab) + 0x18),
        u64_at(sh(symtab) + 0x20),
        u32_at(sh(symtab) + 0x28),
        u64_at(sh(symtab) + 0x38),
    );
    let stroff = u64_at(sh(link) + 0x18);
    (0..size / entsize)
        .map(|i| off + i * entsize)
        // STT_FUNC with a section (defined).
        .filter(|&s| d[s + 4] & 0xf == 2 && u16_at(s + 6) != 0)
        .map(|s| {
            let name = stroff + u32_at(s);
            let end = d[name..].iter().position(|b| *b == 0).unwrap();
            String::from_utf8_lossy(&d[name..name + end]).into_owned()
        })
        .collect()
}

#[test]
fn simulated_cuda_symbols_are_exported_by_name() {
    let syms = elf_function_symbols(env!("CARGO_BIN_EXE_inferscope"));
    for want in [
        "cuMemAlloc_v2",
        "cuMemFree_v2",
        "cuLaunchKernel",
        "cuStreamSynchronize",
        "cuMemGetInfo_v2",
    ] {
        assert!(
            syms.iter().any(|s| s == want),
            "{want} missing from the symbol table"
        );
    }
}

#[test]
fn sim_subcommand_serves_on_an_ephemeral_port() {
    let sim = SimProcess::start(["--profile", "kv-pressure", "--corpus-size", "200"]);
    let (url, line) = (&sim.url, &sim.banner);
    assert!(line.contains("64 KV blocks"), "{line}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let status = rt.block_on(async {
        let c = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http::<http_body_util::Empty<bytes::Bytes>>();
        c.get(format!("{url}/health").parse().unwrap())
            .await
            .unwrap()
            .status()
    });
    drop(sim);
    assert_eq!(status, 200);
}

#[test]
fn sim_rejects_an_unknown_profile() {
    let out = crate::cli::inferscope()
        .args(["sim", "--profile", "nope"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown sim profile"));
}

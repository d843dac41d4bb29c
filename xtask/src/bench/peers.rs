//! The peer tools the loadgen benchmark compares with, installed lazily: `oha` (crates.io,
//! into `$CARGO_HOME/bin`) and `guidellm` (`PyPI`, into `target/venv-bench`). They are not part
//! of `cargo xtask setup`: only this benchmark needs them, and `oha` takes minutes to build.
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::Context as _;

use crate::run;

fn cargo_home() -> PathBuf {
    std::env::var_os("CARGO_HOME").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into())).join(".cargo"),
        PathBuf::from,
    )
}

/// `XTASK_BENCH_NO_INSTALL=1`: compare only with the peers already installed.
fn no_install(what: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        std::env::var_os("XTASK_BENCH_NO_INSTALL").is_none_or(|v| v != "1"),
        "{what} is not installed and XTASK_BENCH_NO_INSTALL=1"
    );
    Ok(())
}

fn works(bin: &Path, arg: &str) -> bool {
    run::output(Command::new(bin).arg(arg)).is_ok_and(|o| o.status.success())
}

/// `oha`, built from crates.io on first use (`--locked`: a newer dependency wants a newer Rust).
pub fn oha() -> anyhow::Result<PathBuf> {
    let bin = cargo_home().join("bin/oha");
    if works(&bin, "--version") {
        return Ok(bin);
    }
    no_install("oha")?;
    println!("bench: installing oha from crates.io (cargo install oha --locked; takes minutes)");
    run::status(&mut run::cargo(&["install", "oha", "--locked"]))
        .context("by hand: cargo install oha --locked")?;
    anyhow::ensure!(
        works(&bin, "--version"),
        "{} does not run after cargo install",
        bin.display()
    );
    Ok(bin)
}

/// The venv that holds guidellm: `target/venv-bench`.
pub fn venv() -> PathBuf {
    run::root().join("target/venv-bench")
}

/// The guidellm release the comparison was measured with.
const GUIDELLM: &str = "guidellm==0.8.1";

/// `guidellm`, installed from `PyPI` into `target/venv-bench` on first use. It needs `torch`
/// (its data loader imports it), and `PyPI`'s Linux `torch` brings CUDA wheels: gigabytes.
pub fn guidellm() -> anyhow::Result<PathBuf> {
    let venv = venv();
    let bin = venv.join("bin/guidellm");
    if works(&bin, "--version") && imports(&venv, "torch") {
        return Ok(bin);
    }
    no_install("guidellm")?;
    println!(
        "bench: installing {GUIDELLM} from PyPI into {} (pulls torch: gigabytes, minutes)",
        venv.display()
    );
    if !venv.join("bin/python").exists() {
        run::status(Command::new("python3").args(["-m", "venv"]).arg(&venv)).context(
            "by hand: python3 -m venv target/venv-bench (Debian: apt-get install python3-venv)",
        )?;
    }
    run::status(Command::new(venv.join("bin/pip")).args(["install", "-q", GUIDELLM]))
        .with_context(|| format!("by hand: target/venv-bench/bin/pip install {GUIDELLM}"))?;
    anyhow::ensure!(
        works(&bin, "--version"),
        "{} does not run after pip install",
        bin.display()
    );
    Ok(bin)
}

fn imports(venv: &Path, module: &str) -> bool {
    run::output(Command::new(venv.join("bin/python")).args(["-c", &format!("import {module}")]))
        .is_ok_and(|o| o.status.success())
}

/// guidellm counts tokens with a Hugging Face tokenizer, and nothing can be downloaded from a
/// model hub here: this writes a tiny whitespace word-level tokenizer (every word one token)
/// that `transformers` loads from a local folder, and returns the folder.
pub fn local_tokenizer() -> anyhow::Result<PathBuf> {
    let dir = run::root().join("target/bench/tokenizer");
    if dir.join("tokenizer.json").exists() {
        return Ok(dir);
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    run::status(
        Command::new(venv().join("bin/python"))
            .args(["-c", MAKE_TOKENIZER])
            .arg(&dir),
    )
    .context("writing a local tokenizer for guidellm")?;
    Ok(dir)
}

const MAKE_TOKENIZER: &str = r#"
import json, sys
from tokenizers import Tokenizer, models, pre_tokenizers
out = sys.argv[1]
words = ["[UNK]", "[EOS]"] + [f"w{i}" for i in range(1000)]
tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tok.save(f"{out}/tokenizer.json")
json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]",
           "eos_token": "[EOS]", "model_max_length": 1000000},
          open(f"{out}/tokenizer_config.json", "w"))
"#;

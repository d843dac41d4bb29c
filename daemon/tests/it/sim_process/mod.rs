//! `inferscope sim` as a child process on an ephemeral loopback port, killed when dropped: its
//! URL read from the line it prints when it serves.

use std::{
    ffi::OsStr,
    io::{BufRead as _, BufReader},
    process::{Child, Stdio},
};

pub struct SimProcess {
    child: Child,
    /// Its base URL (`http://` or `https://`).
    pub url: String,
    /// The line it printed when it started serving.
    pub banner: String,
}

impl SimProcess {
    /// `inferscope sim --listen 127.0.0.1:0 ARGS`.
    pub fn start<S: AsRef<OsStr>>(args: impl IntoIterator<Item = S>) -> Self {
        let mut child = crate::cli::inferscope()
            .args(["sim", "--listen", "127.0.0.1:0"])
            .args(args)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut banner = String::new();
        BufReader::new(child.stderr.take().unwrap())
            .read_line(&mut banner)
            .unwrap();
        let url = banner
            .split_whitespace()
            .find(|w| w.starts_with("http://") || w.starts_with("https://"))
            .unwrap_or_else(|| panic!("no URL in {banner:?}"))
            .to_string();
        SimProcess { child, url, banner }
    }
}

impl Drop for SimProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

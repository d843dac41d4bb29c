//! Reading the files a scenario names (datasets, traces) under a policy: a scenario file given
//! on the command line reads what its user can; a scenario posted to the control API of a root
//! daemon reads only regular files below the daemon's `--data-dir`. Every read is capped.

use std::{
    io::Read as _,
    os::unix::fs::OpenOptionsExt as _,
    path::{Component, Path, PathBuf},
};

/// Largest dataset or trace file read for a scenario given on the command line.
pub const MAX_FILE_BYTES: u64 = 256 << 20;
/// Largest dataset or trace file read for a scenario posted to the control API.
pub const MAX_POSTED_FILE_BYTES: u64 = 64 << 20;

/// Where a scenario's relative file names point, and what it may read.
#[derive(Debug, Clone, Copy)]
pub enum Files<'a> {
    /// Relative to this folder (the scenario file's); absolute names as given.
    Relative(&'a Path),
    /// Only relative names, resolved below this folder (symbolic links included), regular
    /// files only; `None`: no files at all.
    Confined(Option<&'a Path>),
}

impl Files<'_> {
    /// The full name of `name`, checked against the policy.
    pub fn resolve(&self, name: &Path) -> Result<PathBuf, String> {
        match *self {
            Files::Relative(base) => Ok(base.join(name)),
            Files::Confined(None) => Err(format!(
                "{}: a posted scenario reads files only from the daemon's data folder: start the daemon with --data-dir DIR, or use an inline dataset (`prompts: [..]`) or a synthetic one",
                name.display()
            )),
            Files::Confined(Some(dir)) => {
                if !name.components().all(|c| matches!(c, Component::Normal(_)))
                    || name.as_os_str().is_empty()
                {
                    return Err(format!(
                        "{}: name a file relative to the daemon's --data-dir, without `..` or a leading `/`",
                        name.display()
                    ));
                }
                let root = dir
                    .canonicalize()
                    .map_err(|e| format!("the daemon's --data-dir {}: {e}", dir.display()))?;
                let full = root
                    .join(name)
                    .canonicalize()
                    .map_err(|e| format!("{} in --data-dir: {e}", name.display()))?;
                if !full.starts_with(&root) {
                    return Err(format!(
                        "{}: leads outside the daemon's --data-dir (a symbolic link?): copy the file into it",
                        name.display()
                    ));
                }
                Ok(full)
            }
        }
    }

    fn cap(&self) -> u64 {
        match self {
            Files::Relative(_) => MAX_FILE_BYTES,
            Files::Confined(_) => MAX_POSTED_FILE_BYTES,
        }
    }

    /// Reads `name` as UTF-8 text, at most the policy's cap; returns the full name with it.
    pub fn read(&self, name: &Path) -> Result<(PathBuf, String), String> {
        let full = self.resolve(name)?;
        let text = read_capped(&full, self.cap(), matches!(self, Files::Confined(_)))
            .map_err(|e| format!("cannot read {}: {e}", full.display()))?;
        Ok((full, text))
    }
}

/// Reads at most `cap` bytes of `path` as text; more is an error. `regular_only` refuses
/// devices and FIFOs (checked on the opened file, so a swap after a check cannot slip one in).
pub fn read_capped(path: &Path, cap: u64, regular_only: bool) -> Result<String, String> {
    // Non-blocking open: opening a FIFO with no writer would otherwise wait forever.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(if regular_only { libc::O_NONBLOCK } else { 0 })
        .open(path)
        .map_err(|e| e.to_string())?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if regular_only && !meta.is_file() {
        return Err("not a regular file: give a file, not a device, FIFO or folder".into());
    }
    if meta.is_file() && meta.len() > cap {
        return Err(format!(
            "{} bytes is above the limit of {}: use a smaller file",
            meta.len(),
            size(cap)
        ));
    }
    let mut buf = Vec::new();
    file.take(cap + 1)
        .read_to_end(&mut buf)
        .map_err(|e| e.to_string())?;
    if buf.len() as u64 > cap {
        return Err(format!("more than {}: use a smaller file", size(cap)));
    }
    String::from_utf8(buf)
        .map_err(|e| format!("not UTF-8 text (byte {})", e.utf8_error().valid_up_to()))
}

fn size(n: u64) -> String {
    if n >= 1 << 20 {
        format!("{} MiB", n >> 20)
    } else {
        format!("{n} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confined_reads_only_regular_files_below_the_folder() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        std::fs::write(data.join("a.jsonl"), "{\"prompt\":\"x\"}\n").unwrap();
        std::fs::write(dir.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), data.join("link")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", data.join("zero")).unwrap();
        let f = Files::Confined(Some(&data));
        assert_eq!(
            f.read(Path::new("a.jsonl")).unwrap().1,
            "{\"prompt\":\"x\"}\n"
        );
        for bad in ["/etc/passwd", "../secret", "link", "zero", ""] {
            let e = f.read(Path::new(bad)).unwrap_err();
            assert!(!e.is_empty(), "{bad}");
        }
        assert!(
            f.read(Path::new("../secret"))
                .unwrap_err()
                .contains("without `..`")
        );
        assert!(f.read(Path::new("link")).unwrap_err().contains("outside"));
        let none = Files::Confined(None)
            .read(Path::new("a.jsonl"))
            .unwrap_err();
        assert!(none.contains("--data-dir"), "{none}");
    }

    #[test]
    fn fifos_and_devices_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = Files::Confined(Some(dir.path()))
            .read(Path::new("fifo"))
            .unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        let e = read_capped(Path::new("/dev/zero"), 1 << 20, true).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
    }

    #[test]
    fn reads_are_capped() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("big");
        std::fs::write(&p, vec![b'a'; 2048]).unwrap();
        assert!(
            read_capped(&p, 1024, true)
                .unwrap_err()
                .contains("above the limit")
        );
        assert_eq!(read_capped(&p, 4096, true).unwrap().len(), 2048);
        // A device with no size: the cap holds while reading.
        let e = read_capped(Path::new("/dev/zero"), 1024, false).unwrap_err();
        assert!(e.contains("more than"), "{e}");
    }
}

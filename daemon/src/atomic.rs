//! Output files that are either complete or absent: written to a temporary file in the same
//! directory, flushed (a failed final flush is an error, not a truncated report), fsynced and
//! renamed over the destination; and output paths checked before a run spends its time.

use std::{
    fs::File,
    io::{self, BufWriter, Write},
    path::{Path, PathBuf},
};

/// Writes `path` atomically: `fill` writes the content into a buffered temporary file beside
/// it, which is flushed, synced to disk and renamed over `path`; the directory is synced so
/// the rename survives a crash. On any error the temporary file is removed and `path` is left
/// as it was.
pub fn write_atomic(
    path: &Path,
    fill: impl FnOnce(&mut BufWriter<File>) -> io::Result<()>,
) -> io::Result<()> {
    let tmp = temp_beside(path);
    let result = (|| {
        let mut w = BufWriter::new(File::create(&tmp)?);
        fill(&mut w)?;
        // `into_inner` flushes and reports a failed flush, which dropping a BufWriter hides.
        let f = w.into_inner().map_err(io::IntoInnerError::into_error)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)?;
        if let Ok(d) = File::open(parent(path)) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// [`write_atomic`] of a byte string.
pub fn write_bytes(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic(path, |w| w.write_all(bytes))
}

/// Checks, before a run, that `path` can be written: its directory exists (or is created) and
/// accepts a new file, and `path` itself is not a directory.
pub fn check_output_file(path: &Path) -> io::Result<()> {
    if path.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::IsADirectory,
            "is a directory: give a file name",
        ));
    }
    check_output_dir(parent(path))
}

/// Checks, before a run, that files can be created in `dir` (created when missing).
pub fn check_output_dir(dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let probe = temp_beside(&dir.join(".inferscope-write-check"));
    File::create(&probe)?;
    std::fs::remove_file(&probe)
}

fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

fn temp_beside(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map_or_else(|| "out".into(), |n| n.to_string_lossy().into_owned());
    parent(path).join(format!(".{name}.{}.tmp", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complete_or_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.json");
        std::fs::write(&p, "old").unwrap();
        let e = write_atomic(&p, |w| {
            w.write_all(b"half")?;
            Err(io::Error::other("encoder failed"))
        })
        .unwrap_err();
        assert_eq!(e.to_string(), "encoder failed");
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "old");
        write_bytes(&p, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "new");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary file left behind");
    }

    #[test]
    fn outputs_are_checked_up_front() {
        let dir = tempfile::tempdir().unwrap();
        assert!(check_output_file(&dir.path().join("new/sub/r.json")).is_ok());
        assert!(check_output_file(dir.path()).is_err());
        assert!(check_output_dir(Path::new("/proc/1/nope")).is_err());
        assert!(check_output_file(Path::new("/dev/null/r.json")).is_err());
    }
}

//! Load and attach inferscope's eBPF programs (aya), probe kernel features by attaching, and
//! read what the programs recorded. One module per hook family.

use std::path::PathBuf;

use aya::{Ebpf, EbpfLoader};

pub mod privileges;
pub mod runqlat;
pub mod tracefs;

/// The kernel programs, built by `build.rs` from `probe-ebpf`.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/probe"));

/// Why a probe could not be loaded, attached or read. Each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// Not root and without the capabilities BPF needs.
    #[error(
        "{what} needs root (or CAP_BPF+CAP_PERFMON for tracepoints, plus CAP_SYS_ADMIN for uprobes): run it with sudo"
    )]
    Permission {
        /// What was being done.
        what: String,
    },
    /// tracefs is not mounted and could not be mounted.
    #[error(
        "tracefs not found: mount it with `mount -t tracefs tracefs /sys/kernel/tracing` (as root)"
    )]
    NoTracefs,
    /// The kernel has no such tracepoint.
    #[error("tracepoint {event} does not exist on this kernel")]
    MissingTracepoint {
        /// `category:name`.
        event: String,
    },
    /// A tracepoint format lacks a field a program reads.
    #[error("tracepoint {event} has no field `{field}` on this kernel")]
    MissingField {
        /// `category:name`.
        event: String,
        /// The field that is missing.
        field: String,
    },
    /// A tracepoint format file could not be understood.
    #[error("tracepoint {event}: {reason}")]
    Format {
        /// `category:name`.
        event: String,
        /// What is wrong.
        reason: String,
    },
    /// Reading a kernel file failed.
    #[error("reading {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// aya refused to load the object, a program or a map.
    #[error("{what}: {source}")]
    Ebpf {
        /// What was being done.
        what: String,
        /// aya's error, with its causes.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl ProbeError {
    /// Wraps an aya error, translating the ones a user can act on.
    pub(crate) fn ebpf(
        what: impl Into<String>,
        err: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        let what = what.into();
        let text = format!("{err:#?}");
        if text.contains("PermissionDenied") || text.contains("EPERM") || text.contains("EACCES") {
            if !privileges::is_root() {
                return Self::Permission { what };
            }
        }
        if text.contains("tracefs not found") {
            return Self::NoTracefs;
        }
        Self::Ebpf {
            what,
            source: Box::new(err),
        }
    }
}

/// Loads the embedded object with the given globals. Only programs that are later `load()`ed
/// enter the kernel; maps are created for all of them.
pub(crate) fn load(globals: &[(&'static str, u64, usize)]) -> Result<Ebpf, ProbeError> {
    privileges::require_bpf("loading eBPF programs")?;
    raise_memlock_limit();
    let mut loader = EbpfLoader::new();
    let values: Vec<(&str, [u8; 8], usize)> = globals
        .iter()
        .map(|&(n, v, size)| (n, v.to_le_bytes(), size))
        .collect();
    for (name, bytes, size) in &values {
        loader.override_global(name, &bytes[..*size], true);
    }
    loader
        .load(OBJECT)
        .map_err(|e| ProbeError::ebpf("loading the eBPF object", e))
}

/// Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK; lift it so they load there too.
fn raise_memlock_limit() {
    let lim = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: plain syscall with a valid pointer; failure is harmless on current kernels.
    unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) };
}

/// Attaches the classic tracepoint program `prog` to `category:name`.
pub(crate) fn attach_tracepoint(
    ebpf: &mut Ebpf,
    prog: &str,
    category: &str,
    name: &str,
) -> Result<(), ProbeError> {
    let what = format!("attaching to tracepoint {category}:{name}");
    let program: &mut aya::programs::TracePoint = ebpf
        .program_mut(prog)
        .ok_or_else(|| ProbeError::Format {
            event: format!("{category}:{name}"),
            reason: format!("program {prog} missing from the object"),
        })?
        .try_into()
        .map_err(|e| ProbeError::ebpf(what.clone(), e))?;
    program
        .load()
        .map_err(|e| ProbeError::ebpf(what.clone(), e))?;
    program
        .attach(category, name)
        .map_err(|e| ProbeError::ebpf(what, e))?;
    Ok(())
}

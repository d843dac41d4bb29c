//! What can go wrong with a probe, and what became of each hook: [`ProbeError`] says what to
//! do; [`HookStatus`] is one hook's outcome, attached or detached with the reason.

use std::{io, path::PathBuf, sync::Arc};

use aya::{EbpfError, maps::MapError, programs::ProgramError};

use super::{btf::BtfError, privileges};

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
    /// The kernel's BTF could not give what a program needs.
    #[error("{what}: {source}")]
    Btf {
        /// What needed it.
        what: String,
        /// Why BTF could not give it.
        source: Arc<BtfError>,
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
    /// Wraps an aya error, translating the ones a user can act on by the OS error inside.
    pub(crate) fn ebpf(
        what: impl Into<String>,
        err: impl OsError + std::error::Error + Send + Sync + 'static,
    ) -> Self {
        let what = what.into();
        if let Some(os) = err.os_error() {
            // aya says so with a bare `io::Error::other`: its message is all there is.
            if os.kind() == io::ErrorKind::Other && os.to_string() == "tracefs not found" {
                return Self::NoTracefs;
            }
            let denied = os.kind() == io::ErrorKind::PermissionDenied
                || matches!(os.raw_os_error(), Some(libc::EPERM | libc::EACCES));
            if denied && !privileges::is_root() {
                return Self::Permission { what };
            }
        }
        Self::Ebpf {
            what,
            source: Box::new(err),
        }
    }
}

/// The OS error inside an aya error, where aya keeps one: its `#[error(transparent)]` variants
/// hide it from `Error::source`, so each error type is matched here.
pub(crate) trait OsError {
    fn os_error(&self) -> Option<&io::Error>;
}

impl OsError for io::Error {
    fn os_error(&self) -> Option<&io::Error> {
        Some(self)
    }
}

impl OsError for MapError {
    fn os_error(&self) -> Option<&io::Error> {
        match self {
            Self::CreateError { io_error, .. } => Some(io_error),
            Self::IoError(e) => Some(e),
            Self::SyscallError(e) => Some(&e.io_error),
            _ => None,
        }
    }
}

impl OsError for ProgramError {
    fn os_error(&self) -> Option<&io::Error> {
        use aya::programs::{trace_point::TracePointError, uprobe::UProbeError};
        match self {
            Self::LoadError { io_error, .. }
            | Self::TracePointError(TracePointError::FileError { io_error, .. })
            | Self::UProbeError(UProbeError::FileError { io_error, .. }) => Some(io_error),
            Self::SyscallError(e) => Some(&e.io_error),
            Self::IOError(e) => Some(e),
            Self::MapError(e) => e.os_error(),
            _ => None,
        }
    }
}

impl OsError for EbpfError {
    fn os_error(&self) -> Option<&io::Error> {
        match self {
            Self::FileError { error, .. } => Some(error),
            Self::MapError(e) => e.os_error(),
            Self::ProgramError(e) => e.os_error(),
            _ => None,
        }
    }
}

/// What became of one hook.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(into = "HookJson")]
pub struct HookStatus {
    /// Hook name, e.g. `sched:sched_switch` or `cuMemAlloc_v2@/usr/lib/libcuda.so.1`.
    pub probe: String,
    /// Attached, or why not.
    pub state: HookState,
}

/// Whether a hook runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookState {
    /// Attached and running.
    Attached,
    /// Not attached.
    Detached {
        /// Why.
        reason: String,
    },
}

impl HookStatus {
    /// `probe` is attached.
    pub fn attached(probe: impl Into<String>) -> Self {
        Self {
            probe: probe.into(),
            state: HookState::Attached,
        }
    }

    /// `probe` is not attached, because of `reason`.
    pub fn detached(probe: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            probe: probe.into(),
            state: HookState::Detached {
                reason: reason.into(),
            },
        }
    }

    /// Whether the hook runs.
    #[must_use]
    pub fn is_attached(&self) -> bool {
        self.state == HookState::Attached
    }

    /// Why the hook does not run; `None` when it does.
    #[must_use]
    pub fn reason(&self) -> Option<&str> {
        match &self.state {
            HookState::Attached => None,
            HookState::Detached { reason } => Some(reason),
        }
    }
}

/// A hook in JSON (the control API's status): `{probe, attached, reason}`.
#[derive(serde::Serialize)]
struct HookJson {
    probe: String,
    attached: bool,
    reason: Option<String>,
}

impl From<HookStatus> for HookJson {
    fn from(h: HookStatus) -> Self {
        Self {
            attached: h.is_attached(),
            reason: h.reason().map(str::to_owned),
            probe: h.probe,
        }
    }
}

//! Whether GPU sampling is possible on this machine, from what NVML initialisation said.

use std::fmt;

use nvml_wrapper::error::NvmlError;

/// Whether GPU sampling is possible on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuStatus {
    /// NVML works; sampling runs.
    Ready {
        /// The driver version NVML reports.
        driver_version: String,
        /// Number of GPUs.
        devices: u32,
    },
    /// No NVIDIA driver (no NVML library, or the kernel driver is not loaded).
    /// Not an error: the GPU section of a report says so.
    NoDriver {
        /// What NVML said, logged at info level (`RUST_LOG=inferscope=info`).
        detail: String,
    },
    /// The driver is there but NVML refused (permissions, a lost GPU, ...).
    Unavailable {
        /// What NVML said.
        reason: String,
    },
}

impl fmt::Display for GpuStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ready {
                driver_version,
                devices,
            } => write!(f, "{devices} GPU(s), NVIDIA driver {driver_version}"),
            Self::NoDriver { .. } => f.write_str("no NVIDIA driver"),
            Self::Unavailable { reason } => write!(f, "NVML unavailable: {reason}"),
        }
    }
}

/// Maps an NVML initialisation error to a status: a missing library or
/// driver is [`GpuStatus::NoDriver`], anything else [`GpuStatus::Unavailable`].
#[must_use]
pub fn status_from_init_error(e: &NvmlError) -> GpuStatus {
    match e {
        NvmlError::LibloadingError(_)
        | NvmlError::FailedToLoadSymbol(_)
        | NvmlError::LibraryNotFound
        | NvmlError::DriverNotLoaded => GpuStatus::NoDriver {
            detail: e.to_string(),
        },
        other => GpuStatus::Unavailable {
            reason: other.to_string(),
        },
    }
}

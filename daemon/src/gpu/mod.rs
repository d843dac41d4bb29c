//! GPU state from the NVIDIA driver.
//!
//! [`nvml`] samples per-device memory, utilisation, SM clock, power, clock
//! event (throttle) reasons and per-process memory through NVML, loaded at
//! run time: on a machine without the NVIDIA driver the sampler reports
//! [`nvml::GpuStatus::NoDriver`] and the rest of the daemon carries on.
//! [`inventory`] names the machine's GPUs and driver once, for a run's provenance.

#![warn(missing_docs)]

pub mod inventory;
pub mod nvml;
#[cfg(test)]
pub mod nvml_double;

//! NVML sampler: per-GPU memory, utilisation, SM clock, power, clock event
//! reasons and per-process memory at a fixed interval.
//!
//! `libnvidia-ml.so.1` is opened at run time (nvml-wrapper uses `dlopen`), so
//! the daemon builds and runs without a GPU; then [`spawn`] returns
//! [`GpuStatus::NoDriver`], logs one info line, and starts nothing.
//! NVML calls block, so sampling runs on its own thread and hands samples to
//! async code through a bounded tokio channel.

mod clocks;
mod reader;
mod sample;
mod sampler;
mod status;

pub use clocks::{ClockEventReason, ClockEventReasons};
pub use reader::{NvmlReader, merge_processes, sample_all};
pub use sample::{DeviceSample, GpuProcess, GpuSample, GpuSource, XidReport};
pub use sampler::{NvmlConfig, NvmlTask, spawn, spawn_source};
pub use status::{GpuStatus, status_from_init_error};

#[cfg(test)]
mod tests;

//! Which GPUs the machine has, asked of NVML once: the first one's name, how many there are
//! and the driver's version (a run's provenance). Without the NVIDIA driver there is none.

use nvml_wrapper::Nvml;

/// The machine's GPUs as NVML lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inventory {
    /// The first GPU's product name, e.g. `NVIDIA H100 80GB HBM3`.
    pub model: String,
    /// How many GPUs NVML lists.
    pub count: u32,
    /// The NVIDIA driver's version.
    pub driver: String,
}

/// The machine's GPUs; `None` without the driver, without a GPU, or when NVML will not say.
/// Blocks (NVML's initialisation): call it from a blocking thread.
#[must_use]
pub fn read() -> Option<Inventory> {
    let nvml = Nvml::init().ok()?;
    let count = nvml.device_count().ok().filter(|&n| n > 0)?;
    Some(Inventory {
        model: nvml.device_by_index(0).ok()?.name().ok()?,
        count,
        driver: nvml.sys_driver_version().ok()?,
    })
}

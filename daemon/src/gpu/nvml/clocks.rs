//! NVML's clock event reasons ("throttle reasons"): why the SM clock is below its maximum.

use std::fmt;

use serde::{Deserialize, Serialize};

/// NVML's clock event reasons ("throttle reasons") bitmask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClockEventReasons(pub u64);

/// One of NVML's clock event reasons (`nvmlClocksEventReason*` in nvml.h): why the SM clock
/// is below its maximum.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ClockEventReason {
    /// Nothing runs on the GPU.
    Idle,
    /// Application clocks are set below the maximum.
    AppClocksSetting,
    /// The software power cap (the power limit) holds the clocks down.
    SwPowerCap,
    /// Hardware slowdown (temperature or an external power brake signal).
    HwSlowdown,
    /// Clocks follow another GPU of a sync-boost group.
    SyncBoost,
    /// Software thermal slowdown: a temperature limit.
    SwThermal,
    /// Hardware thermal slowdown.
    HwThermal,
    /// Hardware power brake (an external power supply signal).
    HwPowerBrake,
    /// Display clock settings.
    DisplayClocks,
}

impl ClockEventReason {
    /// Every reason with its bit, in bit order.
    pub const ALL: [(u64, ClockEventReason); 9] = [
        (0x1, Self::Idle),
        (0x2, Self::AppClocksSetting),
        (0x4, Self::SwPowerCap),
        (0x8, Self::HwSlowdown),
        (0x10, Self::SyncBoost),
        (0x20, Self::SwThermal),
        (0x40, Self::HwThermal),
        (0x80, Self::HwPowerBrake),
        (0x100, Self::DisplayClocks),
    ];

    /// The `snake_case` name used in JSON and evidence.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::AppClocksSetting => "app_clocks_setting",
            Self::SwPowerCap => "sw_power_cap",
            Self::HwSlowdown => "hw_slowdown",
            Self::SyncBoost => "sync_boost",
            Self::SwThermal => "sw_thermal",
            Self::HwThermal => "hw_thermal",
            Self::HwPowerBrake => "hw_power_brake",
            Self::DisplayClocks => "display_clocks",
        }
    }

    /// True for a power or thermal slowdown: the GPU runs slower than it could under load.
    #[must_use]
    pub fn is_slowdown(self) -> bool {
        matches!(
            self,
            Self::SwPowerCap
                | Self::HwSlowdown
                | Self::SwThermal
                | Self::HwThermal
                | Self::HwPowerBrake
        )
    }
}

impl ClockEventReasons {
    /// The known reasons that are set, in bit order.
    #[must_use]
    pub fn reasons(self) -> Vec<ClockEventReason> {
        ClockEventReason::ALL
            .iter()
            .filter(|(bit, _)| self.0 & bit != 0)
            .map(|&(_, r)| r)
            .collect()
    }

    /// Names of the known bits that are set, in bit order.
    #[must_use]
    pub fn names(self) -> Vec<&'static str> {
        self.reasons()
            .into_iter()
            .map(ClockEventReason::name)
            .collect()
    }

    /// Set bits this version does not know.
    #[must_use]
    pub fn unknown_bits(self) -> u64 {
        self.0 & !ClockEventReason::ALL.iter().fold(0, |m, (bit, _)| m | bit)
    }

    /// True when a power, thermal or hardware slowdown is active.
    #[must_use]
    pub fn is_slowed_down(self) -> bool {
        self.reasons()
            .into_iter()
            .any(ClockEventReason::is_slowdown)
    }
}

impl fmt::Display for ClockEventReasons {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = self.names().into_iter().map(str::to_owned).collect();
        if self.unknown_bits() != 0 {
            parts.push(format!("0x{:x}", self.unknown_bits()));
        }
        if parts.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&parts.join(","))
        }
    }
}

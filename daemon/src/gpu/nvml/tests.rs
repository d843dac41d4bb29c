use std::time::{Duration, Instant};

use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;

use super::*;

#[test]
fn clock_event_reasons_decode_each_bit() {
    let cases = [
        (0x1, "idle"),
        (0x2, "app_clocks_setting"),
        (0x4, "sw_power_cap"),
        (0x8, "hw_slowdown"),
        (0x10, "sync_boost"),
        (0x20, "sw_thermal"),
        (0x40, "hw_thermal"),
        (0x80, "hw_power_brake"),
        (0x100, "display_clocks"),
    ];
    for (bit, name) in cases {
        assert_eq!(ClockEventReasons(bit).names(), vec![name], "bit 0x{bit:x}");
    }
}

#[test]
fn clock_event_reasons_combined_and_unknown() {
    let r = ClockEventReasons(0x4 | 0x40 | 0x1000);
    assert_eq!(r.names(), vec!["sw_power_cap", "hw_thermal"]);
    assert_eq!(r.unknown_bits(), 0x1000);
    assert!(r.is_slowed_down());
    assert_eq!(r.to_string(), "sw_power_cap,hw_thermal,0x1000");
    assert_eq!(ClockEventReasons(0).to_string(), "none");
    assert!(ClockEventReasons(0).names().is_empty());
    // Idle, application clocks and display clocks are not slowdowns under load.
    assert!(!ClockEventReasons(0x1 | 0x2 | 0x100).is_slowed_down());
    assert!(ClockEventReasons(0x8).is_slowed_down());
}

#[test]
fn processes_merge_by_pid() {
    let merged = merge_processes(vec![
        (42, UsedGpuMemory::Used(1 << 30)),
        (7, UsedGpuMemory::Unavailable),
        (42, UsedGpuMemory::Used(1 << 20)),
        (7, UsedGpuMemory::Used(512)),
    ]);
    assert_eq!(
        merged,
        vec![
            GpuProcess {
                pid: 7,
                used_bytes: Some(512)
            },
            GpuProcess {
                pid: 42,
                used_bytes: Some(1 << 30)
            }
        ]
    );
}

#[test]
fn init_errors_map_to_statuses() {
    assert!(matches!(
        status_from_init_error(&NvmlError::DriverNotLoaded),
        GpuStatus::NoDriver { .. }
    ));
    assert!(matches!(
        status_from_init_error(&NvmlError::LibraryNotFound),
        GpuStatus::NoDriver { .. }
    ));
    assert!(matches!(
        status_from_init_error(&NvmlError::NoPermission),
        GpuStatus::Unavailable { .. }
    ));
    assert_eq!(
        GpuStatus::NoDriver { detail: "x".into() }.to_string(),
        "no NVIDIA driver"
    );
}

#[test]
fn missing_library_reports_no_driver() {
    let config = NvmlConfig {
        lib_path: Some("/nonexistent/inferscope-test/libnvidia-ml.so.1".into()),
        ..NvmlConfig::default()
    };
    let task = spawn(&config);
    assert!(
        matches!(task.status, GpuStatus::NoDriver { .. }),
        "got {:?}",
        task.status
    );
    assert!(task.rx.is_none());
    assert_eq!(task.status.to_string(), "no NVIDIA driver");
}

/// With the default library: on a machine without the driver this must be
/// `NoDriver`; where NVML loads, samples must arrive for every device.
#[test]
fn default_library_reports_driver_state() {
    let config = NvmlConfig {
        interval: Duration::from_millis(50),
        ..NvmlConfig::default()
    };
    let mut task = spawn(&config);
    let has_driver = std::path::Path::new("/proc/driver/nvidia/version").exists();
    match &task.status {
        GpuStatus::NoDriver { .. } => {
            assert!(
                !has_driver,
                "driver present but NVML reported {:?}",
                task.status
            );
            assert!(task.rx.is_none());
        }
        GpuStatus::Ready { devices, .. } => {
            let devices = *devices;
            let rx = task.rx.as_mut().unwrap();
            let sample = rx.blocking_recv().unwrap();
            assert_eq!(sample.devices.len() as u32, devices);
            for d in &sample.devices {
                let (used, total) = (d.memory_used_bytes.unwrap(), d.memory_total_bytes.unwrap());
                assert!(total > 0 && used <= total, "{d:?}");
            }
        }
        GpuStatus::Unavailable { reason } => panic!("NVML unavailable: {reason}"),
    }
}

/// The sampler thread runs any [`GpuSource`]: the NVML test double's trace arrives in order,
/// one sample per tick, every field as scripted.
#[test]
fn sampler_delivers_the_test_doubles_trace_in_order() {
    use crate::gpu::nvml_double::{
        NvmlTestDouble, healthy, memory_full, power_capped, thermal, tick,
    };
    let trace = vec![
        tick(vec![healthy(0, &[7])]),
        tick(vec![power_capped(0, &[7])]),
        tick(vec![thermal(0, &[7])]),
        tick(vec![memory_full(0, &[7])]),
    ];
    let double = NvmlTestDouble::new(trace.clone());
    let status = double.status();
    let config = NvmlConfig {
        interval: Duration::from_millis(1),
        capacity: 64,
        lib_path: None,
    };
    let mut task = spawn_source(double, status.clone(), &config);
    assert_eq!(task.status, status);
    let rx = task.rx.as_mut().unwrap();
    // Each tick as scripted, with the energy counter the double keeps: each tick's power over
    // a second added.
    let mut energy_mj = 0;
    for t in &trace {
        let s = rx.blocking_recv().unwrap();
        energy_mj += u64::from(t.devices[0].power_mw.unwrap());
        let want = DeviceSample {
            energy_mj: Some(energy_mj),
            ..t.devices[0].clone()
        };
        assert_eq!(s.devices, [want]);
    }
    let reasons: Vec<Vec<&str>> = trace
        .iter()
        .map(|t| t.devices[0].clock_event_reasons.unwrap().names())
        .collect();
    assert_eq!(
        reasons,
        [
            vec![],
            vec!["sw_power_cap"],
            vec!["sw_thermal", "hw_thermal"],
            vec![]
        ]
    );
}

/// A consumer that stops reading makes the sampler drop samples, and it counts each one
/// (`inferscope_dropped_total{stage="nvml",what="samples"}`).
#[test]
fn a_full_channel_drops_nvml_samples_and_counts_them() {
    use crate::gpu::nvml_double::{NvmlTestDouble, healthy, tick};
    let double = NvmlTestDouble::new(vec![tick(vec![healthy(0, &[7])])]);
    let status = double.status();
    let config = NvmlConfig {
        interval: Duration::from_millis(1),
        capacity: 2,
        lib_path: None,
    };
    let task = spawn_source(double, status, &config);
    let deadline = Instant::now() + Duration::from_secs(5);
    while task.dropped() < 3 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(task.dropped() >= 3, "dropped {}", task.dropped());
}

//! The run-queue probe measures something real: a sleeper's run-queue delay rises when busy
//! threads compete for every CPU. Asserts on the numbers the daemon's own API returns.
use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use inferscope::{
    collect::runq::RunqHist,
    probes::{Family, Probes},
};
use inferscope_tests::{Hogs, cpus, root_or_skip};

/// Runs a 1 ms sleep/wake loop on a thread of this process for `dur`; returns this process's
/// run-queue histogram over that time.
fn measure(probe: &Probes, dur: Duration) -> RunqHist {
    let me = std::process::id();
    let before = probe
        .runq_snapshot()
        .unwrap()
        .get(&me)
        .copied()
        .map(RunqHist)
        .unwrap_or_default();
    let stop = Arc::new(AtomicBool::new(false));
    let s = Arc::clone(&stop);
    let sleeper = std::thread::spawn(move || {
        while !s.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    std::thread::sleep(dur);
    stop.store(true, Ordering::Relaxed);
    sleeper.join().unwrap();
    let after = probe
        .runq_snapshot()
        .unwrap()
        .get(&me)
        .copied()
        .map(RunqHist)
        .unwrap();
    after.since(&before)
}

fn attach(watch: &[u32]) -> Probes {
    let mut p = Probes::load().unwrap();
    p.set_watch(watch).unwrap();
    p.attach(Family::Runqlat).unwrap();
    p
}

#[test]
fn sleeper_delay_grows_under_cpu_contention() {
    if !root_or_skip("sleeper_delay_grows_under_cpu_contention") {
        return;
    }
    let probe = attach(&[std::process::id()]);
    let idle = measure(&probe, Duration::from_secs(2));
    let busy = {
        let _hogs = Hogs::start(2 * cpus(), -10);
        std::thread::sleep(Duration::from_millis(200));
        measure(&probe, Duration::from_secs(3))
    };
    let (idle50, busy50) = (
        idle.quantile_us(0.5).unwrap(),
        busy.quantile_us(0.5).unwrap(),
    );
    println!(
        "idle: n={} p50={idle50:.1}us p90={:.1}us mean={:.1}us p99={:.1}us; busy: n={} p50={busy50:.1}us p90={:.1}us mean={:.1}us p99={:.1}us",
        idle.count(),
        idle.quantile_us(0.9).unwrap(),
        idle.mean_us(),
        idle.quantile_us(0.99).unwrap(),
        busy.count(),
        busy.quantile_us(0.9).unwrap(),
        busy.mean_us(),
        busy.quantile_us(0.99).unwrap()
    );
    assert!(idle.count() > 200, "too few idle samples: {}", idle.count());
    assert!(busy.count() > 50, "too few busy samples: {}", busy.count());
    // On 6.x (EEVDF) a waking sleeper usually preempts a busy task at once, so the median
    // barely moves; the contention shows in the mean and the tail, which grow by orders of
    // magnitude. The hogs run at nice -10 so that they, not whatever else the machine runs,
    // dominate the CPUs.
    let (idle90, busy90) = (
        idle.quantile_us(0.9).unwrap(),
        busy.quantile_us(0.9).unwrap(),
    );
    assert!(
        busy.mean_us() >= 5.0 * idle.mean_us(),
        "mean: idle {:.1}us vs busy {:.1}us",
        idle.mean_us(),
        busy.mean_us()
    );
    assert!(
        busy90 >= 5.0 * idle90,
        "p90: idle {idle90:.1}us vs busy {busy90:.1}us"
    );
    let drops = probe.runq_drops().unwrap();
    assert_eq!(drops.start_full + drops.hist_full, 0, "{drops:?}");
}

#[test]
fn watch_list_excludes_other_processes() {
    if !root_or_skip("watch_list_excludes_other_processes") {
        return;
    }
    let me = std::process::id();
    let probe = attach(&[me]);
    let _hogs = Hogs::start(2, 0);
    std::thread::sleep(Duration::from_millis(500));
    let snap = probe.runq_snapshot().unwrap();
    assert!(
        snap.keys().all(|&t| t == me),
        "recorded other tgids: {:?}",
        snap.keys().collect::<Vec<_>>()
    );
}

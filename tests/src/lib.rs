//! Helpers for inferscope's integration tests that need root and a real kernel.

/// True when running as root; otherwise prints why the calling test is skipped.
#[must_use]
pub fn root_or_skip(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        println!("skipping {test}: needs root (eBPF); CI runs it as root");
    }
    root
}

/// Child processes that busy-loop until dropped.
pub struct Hogs(Vec<std::process::Child>);

impl Hogs {
    /// Starts `n` busy-looping `sh` processes at niceness `nice` (negative = heavier than a
    /// default task, so a waking task cannot simply preempt them).
    #[must_use]
    pub fn start(n: usize, nice: i32) -> Self {
        Self(
            (0..n)
                .map(|_| {
                    std::process::Command::new("nice")
                        .args(["-n", &nice.to_string(), "sh", "-c", "while :; do :; done"])
                        .spawn()
                        .expect("spawn sh")
                })
                .collect(),
        )
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Number of CPUs this process may run on.
#[must_use]
pub fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

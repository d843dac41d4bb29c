//! What is full, and who waits for it: the resource model verdicts start from
//! (`docs/explain.md`, "What is full, and who waits").
//!
//! A request passes through the server's admission slots (running against the engine's cap) and
//! its KV cache before the step loop computes it. Requests that wait, wait for one of them:
//!
//! - waiting with the KV cache full is `kv_cache`, whether or not slots are free (raising the
//!   slot cap would admit nothing the cache can hold);
//! - waiting with every slot taken and the cache with room is `queue` (slots);
//! - waiting with neither full is `queue` (token budget or step loop): the scheduler admits
//!   fewer prompt tokens per step than arrive, or its steps are slow.
//!
//! Only generation requests pass through them: a window of vector searches (or of nothing but a
//! drain) on a server that also generates is not judged by the engine's queue (`engine_judges`).
//!
//! This holds whatever the baseline looked like: a resource at its capacity with requests
//! waiting for it is a bottleneck from the first window (a saturated baseline is reported as
//! one, and the node daemon rarely has a clean baseline). The relative rules
//! (`super::rules`) then say what changed and name the causes this model cannot see
//! (the CPU, the network, the generator, the GPU's allocator and clocks).

use serde::{Deserialize, Serialize};

use super::baseline::Ctx;
use super::verdict::{Cause, Evidence, fmt_num};
use crate::collect::timeline::{ServerSignals, Window};

/// KV usage at and above which the cache is full: an engine that admits a request only when
/// its blocks fit has no room for another prompt of a usual size, and one that allocates as
/// sequences grow preempts next.
pub const KV_FULL: f64 = 0.95;

/// Least share of a request's first token spent waiting for admission (the server's mean queue
/// time over its mean TTFT) for the waiting gauge to be more than requests passing through.
pub const WAIT_SHARE_OF_TTFT: f64 = 0.5;

/// Windows a running count must reach the same ceiling in, with requests waiting and the KV
/// cache with room, to be taken as the engine's slot cap when the engine does not say it.
pub const CAP_PLATEAU_WINDOWS: usize = 3;

/// A resource a request passes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Resource {
    /// Admission slots: running requests against the engine's cap.
    Slots,
    /// The KV cache.
    KvCache,
    /// GPU device memory (NVML's used over total).
    DeviceMemory,
}

impl Resource {
    /// Its name in reports.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Resource::Slots => "admission slots",
            Resource::KvCache => "KV cache",
            Resource::DeviceMemory => "GPU memory",
        }
    }
}

/// Device memory used at and above which the device is full.
pub const DEVICE_MEMORY_FULL: f64 = 0.97;

/// How full each resource of one window is, and how many requests wait.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Occupancy {
    /// Running requests over the slot cap (the engine's, else the ceiling inferred from the
    /// time line: [`admission_cap`]).
    pub slots: Option<f64>,
    /// KV usage, 0..1, and whether the engine preempted (a cache that evicts is full however
    /// its gauge reads).
    pub kv: Option<f64>,
    /// Preemptions (retractions) per second.
    pub preemptions_per_s: Option<f64>,
    /// Device memory used over total.
    pub device_memory: Option<f64>,
    /// Requests waiting in the server (the window's most).
    pub waiting: Option<f64>,
    /// The server's mean queue time over its mean TTFT.
    pub wait_share: Option<f64>,
}

impl Occupancy {
    /// The window's occupancy; `cap` is the slot cap ([`admission_cap`]).
    #[must_use]
    pub fn of(w: &Window, cap: Option<f64>) -> Self {
        let s = w.server.as_ref();
        Self {
            slots: s.and_then(|s| Some(s.running? / slot_cap(s, cap)?)),
            kv: s.and_then(|s| s.kv_usage),
            preemptions_per_s: s.and_then(|s| s.preemptions_per_s),
            device_memory: w.gpu.as_ref().and_then(|g| g.mem_used_frac),
            waiting: s.and_then(|s| s.waiting),
            wait_share: s
                .and_then(|s| Some(s.queue_time_mean_ms? / s.ttft_mean_ms.filter(|t| *t > 0.0)?)),
        }
    }

    /// Whether `r` is at its capacity in this window (`false` when unmeasured).
    #[must_use]
    pub fn is_full(&self, r: Resource) -> bool {
        match r {
            Resource::Slots => self.slots.is_some_and(|f| f >= 1.0),
            Resource::KvCache => {
                self.kv.is_some_and(|k| k >= KV_FULL)
                    || self.preemptions_per_s.is_some_and(|p| p > 0.0)
            }
            Resource::DeviceMemory => self.device_memory.is_some_and(|m| m >= DEVICE_MEMORY_FULL),
        }
    }

    /// The resources at their capacity.
    #[must_use]
    pub fn full(&self) -> Vec<Resource> {
        [Resource::Slots, Resource::KvCache, Resource::DeviceMemory]
            .into_iter()
            .filter(|&r| self.is_full(r))
            .collect()
    }

    /// Whether requests wait inside the server: its waiting gauge at least 1 and, where it
    /// exports its queue time, most of a first token spent waiting (a request passing through
    /// the queue between two steps is no waiter).
    #[must_use]
    pub fn requests_wait(&self) -> bool {
        self.waiting.is_some_and(|n| n >= 1.0)
            && self.wait_share.is_none_or(|s| s >= WAIT_SHARE_OF_TTFT)
    }

    /// The bottleneck this window shows by itself, whatever its baseline: requests waiting
    /// with a resource full, or waiting with neither full. `None` when nothing waits (or the
    /// server exports no waiting gauge).
    #[must_use]
    pub fn bottleneck(&self) -> Option<Bottleneck> {
        if !self.requests_wait() {
            return None;
        }
        let (cause, resource, signature) = if self.is_full(Resource::KvCache) {
            (
                Cause::KvCache,
                Some(Resource::KvCache),
                "full, requests waiting",
            )
        } else if self.is_full(Resource::Slots) {
            (Cause::Queue, Some(Resource::Slots), "slots full")
        } else {
            (Cause::Queue, None, "token budget or step loop")
        };
        // Sure when the server's own queue time says most of the first token was waiting;
        // less so on its waiting gauge alone.
        let confidence = if self.wait_share.is_some() { 0.9 } else { 0.75 };
        Some(Bottleneck {
            cause,
            resource,
            signature,
            confidence,
            evidence: self.evidence(),
        })
    }

    /// What the model read, as evidence lines.
    #[must_use]
    pub fn evidence(&self) -> Vec<Evidence> {
        let line = |signal: &str, value: f64, threshold: f64, met: bool, note: String| Evidence {
            signal: signal.to_owned(),
            value,
            threshold,
            baseline: None,
            met,
            note,
        };
        let mut out = Vec::new();
        if let Some(n) = self.waiting {
            out.push(line(
                "waiting",
                n,
                1.0,
                n >= 1.0,
                "requests waiting in the server".to_owned(),
            ));
        }
        if let Some(s) = self.wait_share {
            out.push(line(
                "queue_share_of_ttft",
                s,
                WAIT_SHARE_OF_TTFT,
                s >= WAIT_SHARE_OF_TTFT,
                "of a first token spent waiting for admission".to_owned(),
            ));
        }
        if let Some(k) = self.kv {
            out.push(line(
                "kv_usage",
                k,
                KV_FULL,
                k >= KV_FULL,
                format!("KV cache full at >= {}", fmt_num(KV_FULL)),
            ));
        }
        if let Some(p) = self.preemptions_per_s.filter(|p| *p > 0.0) {
            out.push(line(
                "preemptions_per_s",
                p,
                0.0,
                true,
                "the cache evicts running sequences".to_owned(),
            ));
        }
        if let Some(f) = self.slots {
            out.push(line(
                "running_share_of_cap",
                f,
                1.0,
                f >= 1.0,
                "running over the slot cap".to_owned(),
            ));
        }
        out
    }

    /// One line: `KV cache full (0.99), 1,552 waiting, slots 22 of 64`.
    #[must_use]
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.is_full(Resource::KvCache) {
            // Full by its gauge, or by its evictions while the gauge reads lower (blocks freed
            // and taken again between two scrapes).
            parts.push(match (self.kv, self.preemptions_per_s) {
                (Some(k), _) if k >= KV_FULL => format!("KV cache full ({})", fmt_num(k)),
                (Some(k), Some(p)) => format!(
                    "KV cache full (usage {}, {} preemptions/s)",
                    fmt_num(k),
                    fmt_num(p)
                ),
                _ => "KV cache full (preempting)".to_owned(),
            });
        }
        if self.is_full(Resource::Slots) {
            parts.push("every admission slot taken".to_owned());
        }
        if let Some(n) = self.waiting.filter(|n| *n >= 1.0) {
            parts.push(format!("{n:.0} waiting"));
        }
        parts.join(", ")
    }
}

/// A bottleneck read from one window's occupancy alone.
#[derive(Debug, Clone, PartialEq)]
pub struct Bottleneck {
    /// `kv_cache` or `queue`.
    pub cause: Cause,
    /// The full resource requests wait for; `None` when neither slots nor the cache are full.
    pub resource: Option<Resource>,
    /// The signature shown with the verdict.
    pub signature: &'static str,
    /// How sure: 0.9 with the server's queue time, 0.75 on its waiting gauge alone.
    pub confidence: f64,
    /// What was read.
    pub evidence: Vec<Evidence>,
}

/// The engine's own cap on running requests where it says it, else `inferred`.
fn slot_cap(s: &ServerSignals, inferred: Option<f64>) -> Option<f64> {
    s.max_running.or(inferred).filter(|c| *c > 0.0)
}

/// The engine's slot cap as its windows show it, when it does not say it: the ceiling
/// `running` reaches while requests wait and the KV cache has room, held in at least
/// [`CAP_PLATEAU_WINDOWS`] windows (a ramp passes through a value once; a cap holds it). With
/// the cache full the ceiling is the cache's, not the slots', and is no cap.
#[must_use]
pub fn admission_cap(windows: &[Window]) -> Option<f64> {
    let declared = windows
        .iter()
        .rev()
        .find_map(|w| w.server.as_ref()?.max_running);
    if declared.is_some() {
        return declared;
    }
    let waiting_with_room: Vec<f64> = windows
        .iter()
        .filter_map(|w| {
            let o = Occupancy::of(w, None);
            (o.waiting.is_some_and(|n| n >= 1.0) && !o.is_full(Resource::KvCache))
                .then(|| w.server.as_ref()?.running)
                .flatten()
        })
        .collect();
    let ceiling = waiting_with_room.iter().copied().reduce(f64::max)?;
    let held = waiting_with_room
        .iter()
        .filter(|&&r| r >= ceiling - 0.5)
        .count();
    (ceiling >= 1.0 && held >= CAP_PLATEAU_WINDOWS).then_some(ceiling)
}

/// The bottleneck of the context's window by the resource model alone.
#[must_use]
pub fn bottleneck(ctx: &Ctx<'_>) -> Option<Bottleneck> {
    engine_judges(ctx.window)
        .then(|| Occupancy::of(ctx.window, ctx.admission_cap).bottleneck())
        .flatten()
}

/// Whether the window's requests are ones the engine's slots and KV cache hold: its workload
/// is generation (a window without requests counts as the server's, generation).
#[must_use]
pub fn engine_judges(w: &Window) -> bool {
    super::baseline::Workload::of(w) == super::baseline::Workload::Llm
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(running: f64, waiting: f64, kv: f64) -> Window {
        Window {
            server: Some(ServerSignals {
                running: Some(running),
                waiting: Some(waiting),
                kv_usage: Some(kv),
                preemptions_per_s: Some(0.0),
                ..ServerSignals::default()
            }),
            ..Window::default()
        }
    }

    #[test]
    fn vector_searches_are_not_judged_by_the_engines_queue() {
        // The KV cache full behind a backlog of generation requests, in a window of searches.
        let mut w = window(23.0, 1500.0, 0.99);
        assert!(engine_judges(&w));
        w.load = Some(crate::collect::timeline::LoadSignals {
            requests: 50,
            endpoint: Some(crate::measure::Endpoint::VectorSearch),
            ..crate::collect::timeline::LoadSignals::default()
        });
        assert!(!engine_judges(&w));
        assert!(!super::super::Signal::KvUsage.applies_in(&w));
        assert!(!super::super::Signal::Waiting.applies_in(&w));
    }

    #[test]
    fn waiting_with_the_cache_full_and_slots_free_is_kv_cache() {
        let o = Occupancy::of(&window(23.0, 1500.0, 0.99), Some(64.0));
        let b = o.bottleneck().unwrap();
        assert_eq!(
            (b.cause, b.resource),
            (Cause::KvCache, Some(Resource::KvCache))
        );
        assert_eq!(o.full(), [Resource::KvCache]);
    }

    #[test]
    fn waiting_with_every_slot_taken_and_room_in_the_cache_is_queue() {
        let b = Occupancy::of(&window(8.0, 12.0, 0.4), Some(8.0))
            .bottleneck()
            .unwrap();
        assert_eq!((b.cause, b.resource), (Cause::Queue, Some(Resource::Slots)));
    }

    #[test]
    fn waiting_with_neither_full_is_the_token_budget_or_the_step_loop() {
        let b = Occupancy::of(&window(5.0, 4.0, 0.5), Some(64.0))
            .bottleneck()
            .unwrap();
        assert_eq!((b.cause, b.resource), (Cause::Queue, None));
    }

    #[test]
    fn a_full_cache_nobody_waits_for_is_no_bottleneck() {
        assert!(
            Occupancy::of(&window(24.0, 0.0, 1.0), None)
                .bottleneck()
                .is_none()
        );
    }

    #[test]
    fn a_request_passing_through_the_queue_is_no_waiter() {
        let mut w = window(8.0, 1.0, 0.4);
        let s = w.server.as_mut().unwrap();
        s.queue_time_mean_ms = Some(3.0);
        s.ttft_mean_ms = Some(60.0);
        assert!(!Occupancy::of(&w, Some(8.0)).requests_wait());
    }

    #[test]
    fn the_cap_is_a_ceiling_held_while_requests_wait_with_room_in_the_cache() {
        // A ramp passes 1, 7, 17 once: no cap.
        let ramp = [
            window(1.0, 5.0, 0.3),
            window(7.0, 9.0, 0.3),
            window(17.0, 3.0, 0.7),
        ];
        assert_eq!(admission_cap(&ramp), None);
        // Four windows at 8 with requests waiting: the cap is 8.
        let held: Vec<Window> = (0..4).map(|_| window(8.0, 6.0, 0.4)).collect();
        assert_eq!(admission_cap(&held), Some(8.0));
        // The same ceiling with the cache full is the cache's.
        let kv: Vec<Window> = (0..4).map(|_| window(23.0, 600.0, 0.99)).collect();
        assert_eq!(admission_cap(&kv), None);
    }
}

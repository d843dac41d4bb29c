//! Phase marks from external load generators (k6, guidellm, locust): "from this instant on, my
//! run is in phase X", for one server or for all. Each server's time line asks
//! [`Marks::phase_at`] for each window so verdicts are reported per phase of *their* run; the
//! control API writes them.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::collect::identity::ServerKey;

/// Longest phase or source name accepted.
pub const MAX_NAME_LEN: usize = 128;

/// One phase boundary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    /// Phase that starts at `at_unix_ms`.
    pub phase: String,
    /// When it starts, Unix ms.
    pub at_unix_ms: u64,
    /// Who marked it (`k6`, `guidellm`, ...), if said.
    pub source: Option<String>,
    /// The server whose phase it marks (`port:8000`, `pod:UID`, ...); every server's when
    /// `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerKey>,
}

impl Mark {
    /// Whether it marks `server`'s time line.
    #[must_use]
    pub fn applies_to(&self, server: &ServerKey) -> bool {
        self.server.as_ref().is_none_or(|s| server.answers_to(s))
    }
}

/// Why a mark was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MarkError {
    /// Empty, too long, or has control characters (they would end up in terminal reports).
    #[error("{field} must be 1-{MAX_NAME_LEN} printable characters")]
    BadName {
        /// `phase` or `source`.
        field: &'static str,
    },
}

fn check(field: &'static str, s: &str) -> Result<(), MarkError> {
    if s.is_empty() || s.chars().count() > MAX_NAME_LEN || s.chars().any(char::is_control) {
        Err(MarkError::BadName { field })
    } else {
        Ok(())
    }
}

/// A bounded, time-ordered list of marks shared by the API (writer) and the time line (reader).
/// When full, the oldest mark is forgotten.
#[derive(Debug, Clone)]
pub struct Marks {
    inner: Arc<Mutex<VecDeque<Mark>>>,
    capacity: usize,
}

impl Default for Marks {
    fn default() -> Self {
        Self::new(4096)
    }
}

impl Marks {
    /// An empty list holding at most `capacity` marks (at least 1).
    #[must_use]
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            inner: Arc::new(Mutex::new(VecDeque::with_capacity(capacity))),
            capacity,
        }
    }

    /// Adds a mark, keeping the list ordered by time (marks may arrive late, with an explicit
    /// time). A mark at the same instant for the same server(s) as an existing one replaces it.
    pub fn push(&self, mark: Mark) -> Result<(), MarkError> {
        check("phase", &mark.phase)?;
        if let Some(s) = &mark.source {
            check("source", s)?;
        }
        let mut list = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let from = list.partition_point(|m| m.at_unix_ms < mark.at_unix_ms);
        let to = list.partition_point(|m| m.at_unix_ms <= mark.at_unix_ms);
        match (from..to).find(|&i| list[i].server == mark.server) {
            Some(i) => list[i] = mark,
            None => list.insert(to, mark),
        }
        while list.len() > self.capacity {
            list.pop_front();
        }
        Ok(())
    }

    /// The phase in force for `server` at `unix_ms`: the newest mark at or before it that
    /// names this server or none.
    #[must_use]
    pub fn phase_at(&self, unix_ms: u64, server: &ServerKey) -> Option<String> {
        let list = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let i = list.partition_point(|m| m.at_unix_ms <= unix_ms);
        list.range(..i)
            .rev()
            .find(|m| m.applies_to(server))
            .map(|m| m.phase.clone())
    }

    /// All marks, oldest first.
    #[must_use]
    pub fn list(&self) -> Vec<Mark> {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(phase: &str, at: u64) -> Mark {
        Mark {
            phase: phase.into(),
            at_unix_ms: at,
            source: Some("k6".into()),
            server: None,
        }
    }

    #[test]
    fn phase_is_the_latest_mark_at_or_before() {
        let m = Marks::new(10);
        let any = ServerKey::Target;
        m.push(mark("peak", 2000)).unwrap();
        m.push(mark("baseline", 1000)).unwrap(); // late, but ordered by time
        assert_eq!(m.phase_at(999, &any), None);
        assert_eq!(m.phase_at(1000, &any).as_deref(), Some("baseline"));
        assert_eq!(m.phase_at(1999, &any).as_deref(), Some("baseline"));
        assert_eq!(m.phase_at(5000, &any).as_deref(), Some("peak"));
        m.push(mark("chaos", 2000)).unwrap();
        assert_eq!(m.phase_at(2000, &any).as_deref(), Some("chaos"));
        assert_eq!(m.list().len(), 2);
    }

    #[test]
    fn a_mark_may_name_one_server() {
        let m = Marks::new(10);
        let a = ServerKey::Process(1);
        let b: ServerKey = "port:8000@netns:7".parse().unwrap();
        m.push(mark("baseline", 1000)).unwrap();
        m.push(Mark {
            server: Some(b.clone()),
            ..mark("peak", 2000)
        })
        .unwrap();
        // The same instant for another server is another mark.
        m.push(Mark {
            server: Some(a.clone()),
            ..mark("drain", 2000)
        })
        .unwrap();
        assert_eq!(m.list().len(), 3);
        assert_eq!(m.phase_at(2500, &b).as_deref(), Some("peak"));
        assert_eq!(m.phase_at(2500, &a).as_deref(), Some("drain"));
        assert_eq!(
            m.phase_at(2500, &ServerKey::Process(2)).as_deref(),
            Some("baseline")
        );
        let peak = m.list().into_iter().find(|m| m.phase == "peak").unwrap();
        let json = serde_json::to_string(&peak).unwrap();
        assert!(json.contains("\"server\":\"port:8000@netns:7\""), "{json}");
        let back: Mark = serde_json::from_str(&json).unwrap();
        assert_eq!(back.server, Some(b));
        assert!(
            serde_json::from_str::<Mark>(
                r#"{"phase":"x","at_unix_ms":1,"source":null,"server":"nope"}"#
            )
            .is_err()
        );
    }

    #[test]
    fn bounded_and_validated() {
        let m = Marks::new(3);
        for i in 0..10 {
            m.push(mark(&format!("p{i}"), i * 10)).unwrap();
        }
        let l = m.list();
        assert_eq!(l.len(), 3);
        assert_eq!(l[0].phase, "p7");
        assert_eq!(
            m.push(mark("", 1)),
            Err(MarkError::BadName { field: "phase" })
        );
        assert!(m.push(mark("a\x1b[1Ab", 1)).is_err());
        assert!(m.push(mark(&"x".repeat(MAX_NAME_LEN + 1), 1)).is_err());
    }
}

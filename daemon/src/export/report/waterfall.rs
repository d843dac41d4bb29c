//! Per-request waterfalls: where one sampled request's time went, from the client's intended
//! start to its last token, joined with kernel timings of the server side.

use serde::{Deserialize, Serialize};

/// One sampled request. Every `*_ms` field is an offset from `intended_start_unix_ms`, so a
/// waterfall reads left to right without clock arithmetic; kernel fields are `None` when the
/// probes were off or the request could not be joined by its connection.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Waterfall {
    /// The load generator's request id.
    pub request_id: u64,
    /// Phase the request started in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// When the schedule wanted the request sent, Unix ms (fractional).
    pub intended_start_unix_ms: f64,
    /// Client wrote the request (send lag = this).
    pub sent_ms: f64,
    /// Server socket received the request (kernel).
    #[serde(default)]
    pub server_received_ms: Option<f64>,
    /// Server wrote its first response bytes (kernel).
    #[serde(default)]
    pub server_first_byte_ms: Option<f64>,
    /// Server wrote its first token (kernel: second write of the stream).
    #[serde(default)]
    pub server_first_token_ms: Option<f64>,
    /// Client read the first token (TTFT).
    #[serde(default)]
    pub client_first_token_ms: Option<f64>,
    /// Client read each further token.
    #[serde(default)]
    pub token_ms: Vec<f64>,
    /// Client read the end of the response.
    pub end_ms: f64,
    /// Run-queue delay of the server's threads inside [sent, end], ms.
    #[serde(default)]
    pub runq_delay_ms: Option<f64>,
    /// Host time the server blocked in GPU synchronisation inside [sent, end], ms.
    #[serde(default)]
    pub gpu_sync_ms: Option<f64>,
    /// Why the request failed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Waterfall {
    /// Time to first token as the client saw it, from the intended start.
    #[must_use]
    pub fn ttft_ms(&self) -> Option<f64> {
        self.client_first_token_ms
    }

    /// Client TTFT minus the server's first-token write: the network's share of the first token.
    #[must_use]
    pub fn network_ms(&self) -> Option<f64> {
        Some(self.client_first_token_ms? - self.server_first_token_ms?)
    }

    /// Offsets that go backwards make a waterfall meaningless: the first out-of-order stage, if
    /// any (stages that are absent are skipped).
    #[must_use]
    pub fn out_of_order(&self) -> Option<&'static str> {
        let stages = [
            ("sent", Some(self.sent_ms)),
            ("server_received", self.server_received_ms),
            ("server_first_byte", self.server_first_byte_ms),
            ("server_first_token", self.server_first_token_ms),
            ("client_first_token", self.client_first_token_ms),
            ("end", Some(self.end_ms)),
        ];
        let mut last = 0.0;
        for (name, at) in stages {
            if let Some(t) = at {
                if t < last {
                    return Some(name);
                }
                last = t;
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_share_and_order() {
        let mut w = Waterfall {
            sent_ms: 0.2,
            server_received_ms: Some(0.4),
            server_first_byte_ms: Some(1.0),
            server_first_token_ms: Some(80.0),
            client_first_token_ms: Some(86.5),
            end_ms: 900.0,
            ..Waterfall::default()
        };
        assert_eq!(w.network_ms(), Some(6.5));
        assert_eq!(w.out_of_order(), None);
        w.server_received_ms = Some(0.1);
        assert_eq!(w.out_of_order(), Some("server_received"));
        w.server_first_token_ms = None;
        assert_eq!(w.network_ms(), None);
    }
}

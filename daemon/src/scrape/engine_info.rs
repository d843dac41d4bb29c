//! What an engine says about its own limits, asked once beside its `/metrics`: its cap on
//! running requests (the admission slots of `attribute::resources`) and, for TGI, its batch's
//! token budget (which makes its KV usage). vLLM exports neither; its cap is then inferred from
//! the windows.

use super::mapping::ServerKind;

/// The engine's own limits, where it says them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EngineInfo {
    /// Its cap on requests running at once: `SGLang`'s `max_running_requests`
    /// (`/get_server_info`), TGI's `max_concurrent_requests` (`/info`), llama.cpp's
    /// `total_slots` (`/props`).
    pub max_running: Option<f64>,
    /// TGI's `max_batch_total_tokens` (`/info`).
    pub max_batch_total_tokens: Option<u64>,
}

/// The path that says it, per engine; `None` for an engine that has none (vLLM) or an
/// unknown server.
#[must_use]
pub fn path(engine: ServerKind) -> Option<&'static str> {
    match engine {
        ServerKind::Sglang => Some("/get_server_info"),
        ServerKind::Tgi => Some("/info"),
        ServerKind::LlamaCpp => Some("/props"),
        ServerKind::Vllm | ServerKind::Unknown => None,
    }
}

/// Reads `engine`'s answer at [`path`]; what it does not hold stays `None` (a body that is no
/// JSON gives nothing).
#[must_use]
pub fn parse(engine: ServerKind, body: &[u8]) -> EngineInfo {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else {
        return EngineInfo::default();
    };
    let positive = |v: Option<&serde_json::Value>| v?.as_u64().filter(|&n| n > 0);
    match engine {
        // The server's arguments at the top level; the scheduler's effective value in its
        // internal state where the argument was left to its default.
        ServerKind::Sglang => EngineInfo {
            max_running: positive(v.get("max_running_requests"))
                .or_else(|| {
                    positive(
                        v.get("internal_states")?
                            .get(0)?
                            .get("max_running_requests"),
                    )
                })
                .map(|n| n as f64),
            max_batch_total_tokens: None,
        },
        ServerKind::Tgi => EngineInfo {
            max_running: positive(v.get("max_concurrent_requests")).map(|n| n as f64),
            max_batch_total_tokens: positive(v.get("max_batch_total_tokens")),
        },
        ServerKind::LlamaCpp => EngineInfo {
            max_running: positive(v.get("total_slots")).map(|n| n as f64),
            max_batch_total_tokens: None,
        },
        ServerKind::Vllm | ServerKind::Unknown => EngineInfo::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_engine_says_its_cap_in_its_own_words() {
        let sglang =
            br#"{"max_running_requests": null, "internal_states": [{"max_running_requests": 48}]}"#;
        assert_eq!(parse(ServerKind::Sglang, sglang).max_running, Some(48.0));
        let tgi = br#"{"max_concurrent_requests": 128, "max_batch_total_tokens": 102400}"#;
        assert_eq!(
            parse(ServerKind::Tgi, tgi),
            EngineInfo {
                max_running: Some(128.0),
                max_batch_total_tokens: Some(102_400)
            }
        );
        let llamacpp = br#"{"total_slots": 4, "default_generation_settings": {}}"#;
        assert_eq!(parse(ServerKind::LlamaCpp, llamacpp).max_running, Some(4.0));
        assert_eq!(parse(ServerKind::LlamaCpp, b"<html>").max_running, None);
        assert_eq!(path(ServerKind::Vllm), None);
    }
}

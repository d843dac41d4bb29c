//! An LLM phase's checks: its token caps, and its `conversation:`, `retry:`, `check:` and
//! `chaos.stampede`.

use std::{collections::BTreeMap, sync::Arc};

use crate::loadgen::scenario::{Phase, dataset::Dataset, shape::Load, template::JsonTemplate};
use crate::measure::record::Endpoint;

/// What is wrong with a phase's caps, if anything: the caps must hold for every request of it.
pub(super) fn caps_problem(p: &Phase, endpoint: Endpoint) -> Option<String> {
    if p.max_tokens_per_s.is_some() {
        if !matches!(endpoint, Endpoint::Chat | Endpoint::Completions) {
            return Some(
                "`max_tokens_per_s` caps the output tokens requests ask for: it needs an LLM endpoint (chat or completions)"
                    .into(),
            );
        }
        let in_body = matches!(&p.request.body, Some(JsonTemplate::Object(fields))
            if fields.iter().any(|(k, _)| k == "max_tokens"));
        if p.request.max_tokens.is_none() && !in_body {
            return Some(
                "`max_tokens_per_s` counts the tokens each request asks for: set `request.max_tokens`"
                    .into(),
            );
        }
    }
    if p.when_capped == crate::loadgen::scenario::CapPolicy::Drop
        && matches!(p.load, Load::Concurrency { .. })
    {
        return Some(
            "`when_capped: drop` drops open-loop arrivals; a closed loop (`concurrency`) waits for its caps: drop `when_capped`"
                .into(),
        );
    }
    None
}

/// What is wrong with a phase's `conversation:` or `check:`, if anything.
pub(super) fn llm_extras_problem(
    p: &Phase,
    endpoint: Endpoint,
    loaded: &BTreeMap<String, Arc<Dataset>>,
) -> Option<String> {
    use crate::loadgen::scenario::limits::{MAX_SYSTEM_WORDS, MAX_TURNS};
    if let Some(c) = &p.request.conversation {
        if endpoint != Endpoint::Chat {
            return Some(
                "`conversation:` needs `endpoint: chat` (a history is a list of messages)".into(),
            );
        }
        if !(1..=MAX_TURNS).contains(&c.turns) {
            return Some(format!("conversation turns must be 1..={MAX_TURNS}"));
        }
        if c.logprobs.is_some_and(|k| !(1..=20).contains(&k)) {
            return Some("conversation logprobs (top_logprobs per token) must be 1..=20".into());
        }
        if c.system_prompt_words.is_some_and(|w| w > MAX_SYSTEM_WORDS) {
            return Some(format!(
                "conversation system_prompt_words must be at most {MAX_SYSTEM_WORDS}"
            ));
        }
        let recorded = p
            .request
            .dataset
            .as_ref()
            .and_then(|d| loaded.get(d))
            .is_some_and(|d| d.has_conversations());
        if c.reply == crate::loadgen::scenario::ReplySource::Recorded && !recorded {
            return Some(
                "`reply: recorded` needs a ShareGPT dataset with replies (`request.dataset`)"
                    .into(),
            );
        }
    }
    if let Some(r) = &p.request.retry {
        if !(1..=10).contains(&r.max) {
            return Some("retry max (retries after the first attempt) must be 1..=10".into());
        }
        if r.on.is_empty() {
            return Some("retry on: name at least one of connect, 5xx, timeout".into());
        }
    }
    if p.request.check.is_some() && !matches!(endpoint, Endpoint::Chat | Endpoint::Completions) {
        return Some("`check:` needs an LLM endpoint (chat or completions)".into());
    }
    if let Some(st) = &p.chaos.stampede {
        if !matches!(endpoint, Endpoint::Chat | Endpoint::Completions) {
            return Some("`chaos.stampede` needs an LLM endpoint (chat or completions)".into());
        }
        if p.request.conversation.is_some() {
            return Some("`chaos.stampede` sends single requests: drop `conversation:`".into());
        }
        if !(2..=crate::loadgen::scenario::limits::MAX_STAMPEDE).contains(&st.size) {
            return Some(format!(
                "chaos.stampede size must be 2..={}",
                crate::loadgen::scenario::limits::MAX_STAMPEDE
            ));
        }
        if st.every.is_zero() || st.every >= p.duration {
            return Some(
                "chaos.stampede every must be above 0s and below the phase's duration".into(),
            );
        }
    }
    None
}

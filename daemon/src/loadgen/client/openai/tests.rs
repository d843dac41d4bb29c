//! Reading streamed and whole answers: tokens, usage, finish reasons, tool calls, entropy and
//! failures.

use super::chunk::Chunk;
use super::*;
use crate::measure::record::{ErrorClass, RequestRecord, TokenSource};

fn run(input: &[u8]) -> (StreamState, Result<(), StreamError>) {
    let mut st = StreamState::default();
    let r = input
        .iter()
        .enumerate()
        .try_for_each(|(i, b)| st.feed(&[*b], i as u64));
    let r = r.and_then(|()| st.finish());
    (st, r)
}

const CHAT: &[u8] = b"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n\
data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n\
data: {\"choices\":[{\"delta\":{\"content\":\"lo\"},\"finish_reason\":null}]}\n\n\
data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]}\n\n\
data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":3}}\n\n\
data: [DONE]\n\n";

#[test]
fn token_entropy_from_top_logprobs() {
    let ln = f64::ln;
    // Two equal outcomes holding all the mass: ln 2.
    let h = token_entropy([ln(0.5), ln(0.5)]).unwrap();
    assert!((h - 2f64.ln()).abs() < 1e-12);
    // One sure outcome: 0.
    assert!(token_entropy([0.0]).unwrap().abs() < 1e-12);
    // 0.5 seen, 0.5 outside the top k as one outcome: ln 2 (a lower bound).
    let h = token_entropy([ln(0.5)]).unwrap();
    assert!((h - 2f64.ln()).abs() < 1e-12);
    assert_eq!(token_entropy([]), None);
    // A chunk's logprobs feed the record's mean entropy.
    let (st, r) = run(
        b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"},\"logprobs\":{\"content\":[{\"token\":\"a\",\"logprob\":-0.69,\"top_logprobs\":[{\"token\":\"a\",\"logprob\":-0.6931471805599453},{\"token\":\"b\",\"logprob\":-0.6931471805599453}]}]},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
    );
    r.unwrap();
    let mut rec = RequestRecord::new(0, 0, crate::measure::Endpoint::Chat, 0);
    st.fill(&mut rec);
    assert!((rec.entropy.unwrap() - 2f64.ln()).abs() < 1e-9);
}

#[test]
fn streamed_and_whole_tool_calls_are_put_together() {
    let (st, r) = run(b"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"lookup\",\"arguments\":\"{\\\"q\"}}]}}]}\n\n\
data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\": 1}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n");
    assert_eq!(r, Ok(()));
    assert!(st.token_us.is_empty(), "a tool call carries no text");
    assert_eq!(
        st.tool_calls,
        [ToolCall {
            id: "call_1".into(),
            name: "lookup".into(),
            arguments: "{\"q\": 1}".into()
        }]
    );
    let mut whole = StreamState::default();
    whole.absorb(
        &serde_json::json!({"choices": [{"message": {"role": "assistant", "content": null,
            "tool_calls": [{"id": "call_2", "type": "function",
                "function": {"name": "f", "arguments": "{}"}}]}, "finish_reason": "tool_calls"}]}),
        None,
    );
    assert_eq!(whole.tool_calls.len(), 1);
    assert_eq!(whole.tool_calls[0].name, "f");
}

#[test]
fn chat_stream_with_usage() {
    let (st, r) = run(CHAT);
    assert_eq!(r, Ok(()));
    assert_eq!(st.token_us.len(), 2);
    assert_eq!((st.usage_output, st.usage_input), (Some(3), Some(5)));
    assert_eq!(st.finish_reason.as_deref(), Some("length"));
    let mut rec = RequestRecord::new(0, 0, crate::measure::record::Endpoint::Chat, 0);
    st.fill(&mut rec);
    assert_eq!(
        (rec.output_tokens, rec.token_source),
        (Some(3), Some(TokenSource::Usage))
    );
}

#[test]
fn completions_without_usage_counts_deltas() {
    let (st, r) = run(b"data: {\"choices\":[{\"text\":\"a\"}]}\r\n\r\ndata: {\"choices\":[{\"text\":\"b\",\"finish_reason\":\"stop\"}]}\r\n\r\ndata: [DONE]\r\n\r\n");
    assert_eq!(r, Ok(()));
    let mut rec = RequestRecord::new(0, 0, crate::measure::record::Endpoint::Completions, 0);
    st.fill(&mut rec);
    assert_eq!(
        (rec.output_tokens, rec.token_source),
        (Some(2), Some(TokenSource::Deltas))
    );
}

#[test]
fn missing_done_is_ok_with_finish_reason_else_malformed() {
    let with_finish = &CHAT[..CHAT.len() - b"data: [DONE]\n\n".len()];
    assert_eq!(run(with_finish).1, Ok(()));
    let (_, r) = run(b"data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n");
    assert_eq!(r.unwrap_err().0, ErrorClass::MalformedStream);
}

#[test]
fn truncated_stream_is_malformed() {
    let (st, r) = run(b"data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: {\"choi");
    assert_eq!(st.token_us.len(), 1);
    let (class, msg) = r.unwrap_err();
    assert_eq!(class, ErrorClass::MalformedStream);
    assert!(msg.contains("truncated"), "{msg}");
}

#[test]
fn error_events() {
    let (_, r) = run(b"data: {\"error\":{\"message\":\"KV cache full\",\"type\":\"server_error\",\"code\":503}}\n\n");
    assert_eq!(
        r,
        Err((ErrorClass::ServerErrorEvent, "KV cache full".into()))
    );
    let (_, r) = run(b"event: error\ndata: boom\n\n");
    assert_eq!(r, Err((ErrorClass::ServerErrorEvent, "boom".into())));
    let (_, r) = run(b"data: not json\n\n");
    assert_eq!(r.unwrap_err().0, ErrorClass::MalformedStream);
}

#[test]
fn every_split_of_a_stream_gives_the_same_tokens() {
    for i in 0..=CHAT.len() {
        let mut st = StreamState::default();
        st.feed(&CHAT[..i], 1).unwrap();
        st.feed(&CHAT[i..], 2).unwrap();
        st.finish().unwrap();
        assert_eq!(st.token_us.len(), 2, "split {i}");
        assert_eq!(st.usage_output, Some(3));
    }
}

/// Every chunk shape reads the same through the in-place parse and through a `Value`
/// (the path for unusual chunks): tokens, finish reason and usage.
#[test]
fn typed_and_value_paths_agree() {
    let chunks = [
        r#"{"choices":[{"delta":{"content":"a"}}]}"#,
        r#"{"choices":[{"delta":{"content":null,"reasoning_content":"think"}}]}"#,
        r#"{"choices":[{"delta":{"content":""},"finish_reason":null}]}"#,
        r#"{"choices":[{"text":"b","finish_reason":"stop"}]}"#,
        r#"{"choices":[{"delta":{"content":"c\u00e9\"q"}}],"usage":null}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2}}"#,
        r#"{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{}}]}"#,
    ];
    for c in chunks {
        let typed: Chunk<'_> = serde_json::from_str(c).expect(c);
        let mut a = StreamState::default();
        a.apply(typed.summary(), Some(1));
        let mut b = StreamState::default();
        b.absorb(&serde_json::from_str(c).unwrap(), Some(1));
        assert_eq!(
            (a.token_us, a.finish_reason, a.usage_output, a.usage_input),
            (b.token_us, b.finish_reason, b.usage_output, b.usage_input),
            "{c}"
        );
    }
    // Unusual types fall back to the `Value` path instead of failing the stream.
    let (st, r) =
        run(b"data: {\"choices\":[{\"text\":5,\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n");
    assert_eq!(r, Ok(()));
    assert_eq!(st.finish_reason.as_deref(), Some("stop"));
}

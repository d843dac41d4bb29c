//! OpenAI-compatible chat and completions: request bodies, and reading answers
//! (streamed SSE or whole JSON) into token times, usage and `finish_reason`.
//!
//! Output tokens come from the server's `usage.completion_tokens` (streaming requests ask
//! for it with `stream_options.include_usage`). Without usage the count falls back to the
//! number of content-bearing deltas
//! ([`TokenSource::Deltas`](crate::measure::record::TokenSource::Deltas)): exact for servers
//! that send one token per chunk, an under-count for those that batch tokens (speculative
//! decoding). A stream that ends without `[DONE]` is accepted when a `finish_reason` was
//! seen (some servers omit `[DONE]`); without either it is a truncated stream
//! (`malformed_stream`).
//!
//! `chunk` holds the wire format of a chunk, `stream` one answer read as it arrives, `answer`
//! a request sent and its answer read.

mod answer;
mod chunk;
mod stream;

pub use answer::{Answer, Call, answer, call};
pub use chunk::token_entropy;
pub use stream::{MAX_REPLY_BYTES, MAX_TOKEN_TIMES, StreamError, StreamState, ToolCall};

#[cfg(test)]
mod tests;

//! `POST /v1/chat/completions` and `POST /v1/completions`: validation, then generation by the
//! engine (or by the `fixed` timer), answered whole or streamed as SSE.

use std::sync::{Arc, atomic::Ordering};

use axum::{
    Json,
    body::{Body, Bytes},
    extract::State,
    http::{StatusCode, header},
    response::{IntoResponse, Response},
};

use super::{
    config::SimConfig,
    fixed::{FixedRequest, Schedule},
    format::{Format, Kind},
    openai::{self, ApiError, ChatRequest, CompletionRequest, Prompt},
    sampler::Sampler,
    scheduler::{FinishReason, NewSeq, Scheduler},
    state::{AppState, St},
    stream::{AbortGuard, Collected, Source, SseBody, collect},
    tokenizer::{self, fnv1a},
    tools,
};

pub(crate) fn check_model(s: &AppState, model: &str) -> Result<(), ApiError> {
    if model == s.cfg.model {
        Ok(())
    } else {
        Err(ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!("The model `{model}` does not exist."),
            param: Some("model"),
        })
    }
}

/// What both completion endpoints hand to [`generate`].
struct Gen {
    fmt: Format,
    prompt: Vec<u32>,
    max_tokens: Option<u64>,
    /// Used when `max_tokens` is absent: `None` = the model's natural answer length.
    default_max: Option<usize>,
    temperature: Option<f64>,
    seed: Option<i64>,
    stream: bool,
}

pub(crate) async fn chat(State(s): St, body: Bytes) -> Response {
    let r: ChatRequest = match openai::parse(&body) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let res = (|| {
        check_model(&s, &r.model)?;
        if r.messages.is_empty() {
            return Err(ApiError::bad_request(
                "messages must not be empty",
                Some("messages"),
            ));
        }
        if r.top_logprobs.is_some_and(|k| k > 20) {
            return Err(ApiError::bad_request(
                "top_logprobs must be within 0..=20",
                Some("top_logprobs"),
            ));
        }
        let texts: Vec<(String, String)> = r
            .messages
            .iter()
            .map(|m| {
                (
                    m.role.clone(),
                    m.content
                        .as_ref()
                        .map(openai::Content::text)
                        .unwrap_or_default(),
                )
            })
            .collect();
        let prompt = tokenizer::encode_chat(texts.iter().map(|(r, c)| (r.as_str(), c.as_str())));
        let tool = tools::plan(
            &s.cfg.tools,
            r.tools.as_deref().unwrap_or_default(),
            r.tool_choice.as_ref(),
            &r.messages,
        )?;
        Ok(Gen {
            fmt: Format {
                kind: Kind::Chat,
                id: String::new(),
                created: crate::clock::unix_s(),
                model: r.model.clone(),
                logprobs: r
                    .logprobs
                    .unwrap_or(false)
                    .then(|| r.top_logprobs.unwrap_or(0)),
                include_usage: r.stream_options.as_ref().is_some_and(|o| o.include_usage),
                tool,
            },
            prompt,
            max_tokens: r.max_completion_tokens.or(r.max_tokens),
            default_max: None,
            temperature: r.temperature,
            seed: r.seed,
            stream: r.stream.unwrap_or(false),
        })
    })()
    .and_then(|g| check_n(r.n).map(|()| g));
    match res {
        Ok(g) => generate(s, g).await,
        Err(e) => e.into_response(),
    }
}

fn check_n(n: Option<u32>) -> Result<(), ApiError> {
    if n.unwrap_or(1) == 1 {
        Ok(())
    } else {
        Err(ApiError::bad_request("only n=1 is supported", Some("n")))
    }
}

pub(crate) async fn completions(State(s): St, body: Bytes) -> Response {
    let r: CompletionRequest = match openai::parse(&body) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let res = (|| {
        check_model(&s, &r.model)?;
        check_n(r.n)?;
        if r.logprobs.is_some_and(|k| k > 5) {
            return Err(ApiError::bad_request(
                "logprobs must be within 0..=5",
                Some("logprobs"),
            ));
        }
        let prompt = match &r.prompt {
            Prompt::Text(t) => tokenizer::encode(t),
            Prompt::Tokens(t) => t.iter().map(|x| x % tokenizer::VOCAB_SIZE).collect(),
            Prompt::Batch(b) if b.len() == 1 => tokenizer::encode(&b[0]),
            Prompt::Batch(_) => {
                return Err(ApiError::bad_request(
                    "only one prompt per request is supported",
                    Some("prompt"),
                ));
            }
        };
        Ok(Gen {
            fmt: Format {
                kind: Kind::Completion,
                id: String::new(),
                created: crate::clock::unix_s(),
                model: r.model.clone(),
                logprobs: r.logprobs,
                include_usage: r.stream_options.as_ref().is_some_and(|o| o.include_usage),
                tool: None,
            },
            prompt,
            max_tokens: r.max_tokens,
            // OpenAI's legacy completions default.
            default_max: Some(16),
            temperature: r.temperature,
            seed: r.seed,
            stream: r.stream.unwrap_or(false),
        })
    })();
    match res {
        Ok(g) => generate(s, g).await,
        Err(e) => e.into_response(),
    }
}

/// Checks lengths and sampling parameters; returns `(max_tokens, stop_after, temperature)`.
fn limits(cfg: &SimConfig, g: &Gen, seed: u64) -> Result<(usize, Option<usize>, f64), ApiError> {
    let max_len = Scheduler::max_len(&cfg.engine);
    let plen = g.prompt.len();
    if plen == 0 {
        return Err(ApiError::bad_request("the prompt is empty", Some("prompt")));
    }
    if plen >= max_len {
        return Err(ApiError::bad_request(
            format!(
                "This model's maximum context length is {max_len} tokens. However, you requested {plen} tokens in the prompt."
            ),
            Some("messages"),
        ));
    }
    let room = max_len - plen;
    let temperature = g.temperature.unwrap_or(1.0);
    if !(0.0..=2.0).contains(&temperature) {
        return Err(ApiError::bad_request(
            "temperature must be within 0..=2",
            Some("temperature"),
        ));
    }
    let (max_tokens, stop_after) = match g.max_tokens {
        Some(0) => {
            return Err(ApiError::bad_request(
                "max_tokens must be at least 1",
                Some("max_tokens"),
            ));
        }
        Some(want) if want > room as u64 => {
            return Err(ApiError::bad_request(
                format!(
                    "This model's maximum context length is {max_len} tokens. However, you requested {} tokens ({plen} in the prompt, {want} for the completion).",
                    plen as u64 + want
                ),
                Some("max_tokens"),
            ));
        }
        Some(want) => (want as usize, None),
        None => match g.default_max {
            Some(default) => (default.min(room), None),
            // The simulated model's own answer length: 16..256 tokens, from the seed.
            None => (room, Some(16 + (seed % 240) as usize)),
        },
    };
    Ok((max_tokens, stop_after, temperature))
}

async fn generate(state: Arc<AppState>, mut gen_req: Gen) -> Response {
    let arrival = tokio::time::Instant::now();
    let id = state.next_id.fetch_add(1, Ordering::Relaxed);
    let seed = gen_req.seed.map_or_else(
        || fnv1a(&id.to_le_bytes()) ^ prompt_hash(&gen_req.prompt),
        |x| x as u64,
    );
    let (max_tokens, stop_after, temperature) = match limits(&state.cfg, &gen_req, seed) {
        Ok(l) => l,
        Err(e) => return e.into_response(),
    };
    // A tool call is exactly its arguments' tokens (fewer when max_tokens cuts it).
    let (max_tokens, stop_after) = match &gen_req.fmt.tool {
        Some(call) => (max_tokens.min(call.tokens()), None),
        None => (max_tokens, stop_after),
    };
    let delay = state.faults.delay(std::time::Instant::now());
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    if state.faults.inject_error() {
        return ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "injected fault").into_response();
    }
    let mut sampler = Sampler::new(seed, temperature);
    if gen_req.fmt.logprobs.is_none() {
        sampler = sampler.without_alternatives();
    }
    let prompt_tokens = gen_req.prompt.len();
    let src = match (&state.engine, &state.cfg.fixed) {
        (_, Some(timing)) => {
            let tokens = stop_after.map_or(max_tokens, |a| a.min(max_tokens));
            let req = FixedRequest {
                arrival,
                prompt_tokens,
                tokens,
                reason: if tokens >= max_tokens {
                    FinishReason::Length
                } else {
                    FinishReason::Stop
                },
                sampler,
            };
            Source::Fixed(Box::new(Schedule::new(timing, req, state.shared.clone())))
        }
        (Some(engine), None) => {
            if state.shared.queued.load(Ordering::SeqCst) >= state.cfg.engine.max_waiting {
                return ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the request queue is full; retry later",
                )
                .into_response();
            }
            let prompt = std::mem::take(&mut gen_req.prompt);
            let arrival = arrival.into_std();
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            engine.submit(
                NewSeq {
                    id,
                    prompt,
                    max_tokens,
                    stop_after,
                    sampler,
                    arrival,
                },
                tx,
            );
            Source::Engine(rx)
        }
        (None, None) => unreachable!("an engine runs unless the profile is fixed"),
    };
    let prefix = if gen_req.fmt.kind == Kind::Chat {
        "chatcmpl"
    } else {
        "cmpl"
    };
    gen_req.fmt.id = format!("{prefix}-sim{id:016x}");
    if let Some(call) = &mut gen_req.fmt.tool {
        call.id = format!("call_sim{id:016x}");
        state.counters.tool_calls.fetch_add(1, Ordering::Relaxed);
    }
    let guard = AbortGuard::new(state.engine.clone(), id);
    if gen_req.stream {
        return Response::builder()
            .header(header::CONTENT_TYPE, "text/event-stream")
            .header(header::CACHE_CONTROL, "no-cache")
            .body(Body::new(SseBody::new(src, gen_req.fmt, guard)))
            .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response());
    }
    match collect(src, guard).await {
        Collected::Done {
            tokens,
            reason,
            prompt_tokens,
        } => Json(gen_req.fmt.full(&tokens, reason.as_str(), prompt_tokens)).into_response(),
        Collected::Failed(e) => e.into_response(),
    }
}

fn prompt_hash(p: &[u32]) -> u64 {
    fnv1a(&p.iter().flat_map(|t| t.to_le_bytes()).collect::<Vec<u8>>())
}

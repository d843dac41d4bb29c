//! A trivial server for load-generator benchmarks:
//! `cargo run --release --example hello_http -- ADDR [THREADS] [TTFT_MS ITL_MS TOKENS]`.
//! `GET /` answers "ok" (plain HTTP throughput vs `wrk`/`oha`); any POST answers with an
//! OpenAI-style SSE stream whose first token comes after `TTFT_MS` and each next one
//! `ITL_MS` later (client-side TTFT/ITL measurement accuracy).

use std::{convert::Infallible, time::Duration};

use bytes::Bytes;
use futures_util::stream::StreamExt as _;
use http_body_util::{BodyExt, Full, StreamBody, combinators::UnsyncBoxBody};
use hyper::{Method, Request, Response, body::Frame, server::conn::http1, service::service_fn};
use hyper_util::rt::TokioIo;

#[derive(Clone, Copy)]
struct Timing {
    ttft: Duration,
    itl: Duration,
    tokens: u64,
}

fn sse(t: Timing) -> UnsyncBoxBody<Bytes, Infallible> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(4);
    tokio::spawn(async move {
        let start = tokio::time::Instant::now();
        for i in 0..t.tokens {
            // Absolute deadlines: the server's own timing error does not accumulate.
            tokio::time::sleep_until(start + t.ttft + t.itl * i as u32).await;
            let fin = if i + 1 == t.tokens {
                "\"length\""
            } else {
                "null"
            };
            let chunk = format!(
                "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"tok \"}},\"finish_reason\":{fin}}}]}}\n\n"
            );
            if tx.send(Bytes::from(chunk)).await.is_err() {
                return;
            }
        }
        let usage = format!(
            "data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":1,\"completion_tokens\":{}}}}}\n\ndata: [DONE]\n\n",
            t.tokens
        );
        let _ = tx.send(Bytes::from(usage)).await;
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
    });
    BodyExt::boxed_unsync(StreamBody::new(stream.boxed()))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let addr = args
        .first()
        .cloned()
        .unwrap_or_else(|| "127.0.0.1:8089".into());
    let num = |i: usize, d: u64| args.get(i).and_then(|v| v.parse().ok()).unwrap_or(d);
    let threads = num(1, 1) as usize;
    let timing = Timing {
        ttft: Duration::from_millis(num(2, 50)),
        itl: Duration::from_millis(num(3, 10)),
        tokens: num(4, 16),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&addr).await.expect("bind");
        eprintln!("listening on {}", listener.local_addr().expect("addr"));
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<hyper::body::Incoming>| async move {
                    let body = if req.method() == Method::POST {
                        let _ = req.into_body().collect().await;
                        sse(timing)
                    } else {
                        BodyExt::boxed_unsync(Full::new(Bytes::from_static(b"ok")))
                    };
                    Ok::<_, Infallible>(Response::new(body))
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
}

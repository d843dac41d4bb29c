//! A test double of Qdrant's REST API, as documented (no Qdrant server installs here):
//! `PUT/GET/DELETE /collections/{name}`, `PUT /collections/{name}/points` and
//! `POST /collections/{name}/points/search` and `.../points/query` (the universal query API:
//! `{"query": [..]}` in, `{"result": {"points": [..]}}` out), with the documented shapes.
//! Its search is exact (brute force, Euclid), and it remembers the `hnsw_ef` it was sent.
#![allow(dead_code)]

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use axum::{
    Json, Router,
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::{post, put},
};
use serde_json::{Value, json};

/// A collection: its dimension and points.
#[derive(Default)]
pub struct Coll {
    /// Vector size.
    pub dim: usize,
    /// `(id, vector)`.
    pub points: Vec<(Value, Vec<f32>)>,
}

/// What the double holds and saw.
#[derive(Default)]
pub struct Qdrant {
    /// Collections by name.
    pub colls: Mutex<HashMap<String, Coll>>,
    /// Every `params.hnsw_ef` of a search (null when absent).
    pub hnsw_ef: Mutex<Vec<Value>>,
    /// Answer searches with the first points instead of searching (a rate test's server
    /// must not be the bottleneck).
    pub cheap: std::sync::atomic::AtomicBool,
}

fn not_found(name: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({"status": {"error": format!("Not found: Collection `{name}` doesn't exist!")}, "time": 0.0})),
    )
        .into_response()
}

fn bad(msg: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({"status": {"error": msg}, "time": 0.0})),
    )
        .into_response()
}

fn ok(result: &Value) -> Response {
    Json(json!({"result": result, "status": "ok", "time": 0.0})).into_response()
}

fn floats(v: &Value) -> Option<Vec<f32>> {
    v.as_array()?
        .iter()
        .map(|x| x.as_f64().map(|f| f as f32))
        .collect()
}

async fn create(
    State(q): State<Arc<Qdrant>>,
    Path(name): Path<String>,
    Json(body): Json<Value>,
) -> Response {
    let Some(dim) = body.pointer("/vectors/size").and_then(Value::as_u64) else {
        return bad("missing vectors.size");
    };
    q.colls.lock().unwrap().insert(
        name,
        Coll {
            dim: dim as usize,
            points: Vec::new(),
        },
    );
    ok(&json!(true))
}

async fn delete(State(q): State<Arc<Qdrant>>, Path(name): Path<String>) -> Response {
    let existed = q.colls.lock().unwrap().remove(&name).is_some();
    ok(&json!(existed))
}

async fn info(State(q): State<Arc<Qdrant>>, Path(name): Path<String>) -> Response {
    let colls = q.colls.lock().unwrap();
    let Some(c) = colls.get(&name) else {
        return not_found(&name);
    };
    ok(&json!({
        "status": "green",
        "points_count": c.points.len(),
        "config": {"params": {"vectors": {"size": c.dim, "distance": "Euclid"}}}
    }))
}

async fn upsert(
    State(q): State<Arc<Qdrant>>,
    Path(name): Path<String>,
    Json(body): Json<Value>,
) -> Response {
    let mut colls = q.colls.lock().unwrap();
    let Some(c) = colls.get_mut(&name) else {
        return not_found(&name);
    };
    for p in body["points"].as_array().cloned().unwrap_or_default() {
        let Some(v) = floats(&p["vector"]) else {
            return bad("point vector is not a list of numbers");
        };
        if v.len() != c.dim {
            return bad(&format!(
                "Wrong input: Vector dimension error: expected dim: {}, got {}",
                c.dim,
                v.len()
            ));
        }
        c.points.push((p["id"].clone(), v));
    }
    ok(&json!({"operation_id": 0, "status": "completed"}))
}

async fn search(
    State(q): State<Arc<Qdrant>>,
    Path(name): Path<String>,
    Json(body): Json<Value>,
) -> Response {
    q.hnsw_ef.lock().unwrap().push(
        body.pointer("/params/hnsw_ef")
            .cloned()
            .unwrap_or(Value::Null),
    );
    let colls = q.colls.lock().unwrap();
    let Some(c) = colls.get(&name) else {
        return not_found(&name);
    };
    let query_api = body.get("query").is_some();
    let Some(v) = floats(if query_api {
        &body["query"]
    } else {
        &body["vector"]
    }) else {
        return bad("vector is not a list of numbers");
    };
    if v.len() != c.dim {
        return bad(&format!(
            "Wrong input: Vector dimension error: expected dim: {}, got {}",
            c.dim,
            v.len()
        ));
    }
    let limit = body["limit"].as_u64().unwrap_or(10) as usize;
    if q.cheap.load(std::sync::atomic::Ordering::Relaxed) {
        let result: Vec<Value> = c
            .points
            .iter()
            .take(limit)
            .map(|(id, _)| json!({"id": id, "version": 0, "score": 0.0}))
            .collect();
        return ok(&Value::Array(result));
    }
    let mut scored: Vec<(f32, &Value)> = c
        .points
        .iter()
        .map(|(id, p)| {
            let d: f32 = p.iter().zip(&v).map(|(a, b)| (a - b) * (a - b)).sum();
            (d.sqrt(), id)
        })
        .collect();
    scored.sort_by(|a, b| a.0.total_cmp(&b.0));
    let result: Vec<Value> = scored
        .iter()
        .take(limit)
        .map(|(d, id)| json!({"id": id, "version": 0, "score": d}))
        .collect();
    if query_api {
        return ok(&json!({"points": result}));
    }
    ok(&Value::Array(result))
}

/// Starts the double on a runtime thread of its own (its work does not share the load
/// generator's threads).
pub fn start_in_thread() -> (SocketAddr, Arc<Qdrant>) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            tx.send(start().await).unwrap();
            std::future::pending::<()>().await;
        });
    });
    rx.recv().unwrap()
}

/// Starts the double on 127.0.0.1:0 in the current runtime.
pub async fn start() -> (SocketAddr, Arc<Qdrant>) {
    let q = Arc::new(Qdrant::default());
    let app = Router::new()
        .route("/collections/{name}", put(create).delete(delete).get(info))
        .route("/collections/{name}/points", put(upsert))
        .route("/collections/{name}/points/search", post(search))
        .route("/collections/{name}/points/query", post(search))
        .with_state(q.clone());
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    (addr, q)
}

//! Test double for an OpenTelemetry collector, built on the official protobuf definitions
//! (`opentelemetry-proto`): OTLP/gRPC (plain or TLS) and OTLP/HTTP (plain or TLS) receivers on
//! 127.0.0.1 that store every export request they receive.

// Shared by several test binaries; each uses only part of it.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::Metric;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;

/// The test CA and server certificate (for 127.0.0.1).
pub const TLS_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/otlp-tls");

/// Test double for an OTLP collector: stores every export request it receives.
#[derive(Clone, Default)]
pub struct CollectorDouble {
    pub traces: Arc<Mutex<Vec<ExportTraceServiceRequest>>>,
    pub metrics: Arc<Mutex<Vec<ExportMetricsServiceRequest>>>,
    pub headers: Arc<Mutex<Vec<(String, String)>>>,
}

#[tonic::async_trait]
impl TraceService for CollectorDouble {
    async fn export(
        &self,
        req: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        if let Some(v) = req.metadata().get("x-tenant") {
            self.headers
                .lock()
                .unwrap()
                .push(("x-tenant".into(), v.to_str().unwrap().into()));
        }
        self.traces.lock().unwrap().push(req.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

#[tonic::async_trait]
impl MetricsService for CollectorDouble {
    async fn export(
        &self,
        req: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        self.metrics.lock().unwrap().push(req.into_inner());
        Ok(tonic::Response::new(ExportMetricsServiceResponse {
            partial_success: None,
        }))
    }
}

impl CollectorDouble {
    pub fn serve_grpc(&self) -> String {
        self.serve_grpc_on(std::net::TcpListener::bind("127.0.0.1:0").unwrap())
    }

    /// OTLP/gRPC on a listener bound beforehand (so its port is known before the runtime).
    pub fn serve_grpc_on(&self, listener: std::net::TcpListener) -> String {
        listener.set_nonblocking(true).unwrap();
        let listener = tokio::net::TcpListener::from_std(listener).unwrap();
        let addr = listener.local_addr().unwrap();
        let router = tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(self.clone()))
            .add_service(MetricsServiceServer::new(self.clone()));
        tokio::spawn(
            router.serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
        );
        format!("http://{addr}")
    }

    /// gRPC over TLS with the test CA's server certificate for 127.0.0.1.
    pub async fn serve_grpc_tls(&self) -> String {
        let dir = TLS_DIR;
        let cert = std::fs::read(format!("{dir}/server.pem")).unwrap();
        let key = std::fs::read(format!("{dir}/server.key")).unwrap();
        let tls = tonic::transport::ServerTlsConfig::new()
            .identity(tonic::transport::Identity::from_pem(cert, key));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = tonic::transport::Server::builder()
            .tls_config(tls)
            .unwrap()
            .add_service(TraceServiceServer::new(self.clone()))
            .add_service(MetricsServiceServer::new(self.clone()));
        tokio::spawn(
            router.serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
        );
        format!("https://{addr}")
    }

    /// OTLP/HTTP: protobuf bodies on /v1/traces and /v1/metrics.
    pub async fn serve_http(&self) -> String {
        let app = self.http_router();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        format!("http://{addr}")
    }

    /// OTLP/HTTP over TLS with the test CA's server certificate for 127.0.0.1.
    pub async fn serve_https(&self) -> String {
        use rustls::pki_types::pem::PemObject as _;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let certs = CertificateDer::pem_file_iter(format!("{TLS_DIR}/server.pem"))
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(format!("{TLS_DIR}/server.key")).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let app = self.http_router();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                let (acceptor, app) = (acceptor.clone(), app.clone());
                tokio::spawn(async move {
                    // A client that refuses our certificate ends the handshake: nothing to serve.
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper_util::service::TowerToHyperService::new(app);
                    let _ = hyper_util::server::conn::auto::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
                });
            }
        });
        format!("https://{addr}")
    }

    fn http_router(&self) -> axum::Router {
        use axum::body::Bytes;
        use axum::routing::post;
        let t = self.clone();
        let m = self.clone();
        axum::Router::new()
            .route(
                "/v1/traces",
                post(
                    move |headers: axum::http::HeaderMap, body: Bytes| async move {
                        if let Some(v) = headers.get("x-tenant") {
                            t.headers
                                .lock()
                                .unwrap()
                                .push(("x-tenant".into(), v.to_str().unwrap().into()));
                        }
                        let req = ExportTraceServiceRequest::decode(body).unwrap();
                        t.traces.lock().unwrap().push(req);
                        ExportTraceServiceResponse {
                            partial_success: None,
                        }
                        .encode_to_vec()
                    },
                ),
            )
            .route(
                "/v1/metrics",
                post(move |body: Bytes| async move {
                    m.metrics
                        .lock()
                        .unwrap()
                        .push(ExportMetricsServiceRequest::decode(body).unwrap());
                    ExportMetricsServiceResponse {
                        partial_success: None,
                    }
                    .encode_to_vec()
                }),
            )
    }

    pub fn spans(&self) -> Vec<Span> {
        let traces = self.traces.lock().unwrap();
        traces
            .iter()
            .flat_map(|r| &r.resource_spans)
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| s.spans.clone())
            .collect()
    }

    /// The last export of each metric (cumulative temporality: the last one holds the totals).
    pub fn metrics(&self) -> HashMap<String, Metric> {
        let reqs = self.metrics.lock().unwrap();
        let mut out = HashMap::new();
        for m in reqs
            .iter()
            .flat_map(|r| &r.resource_metrics)
            .flat_map(|r| &r.scope_metrics)
            .flat_map(|s| &s.metrics)
        {
            out.insert(m.name.clone(), m.clone());
        }
        out
    }

    pub fn resource(&self) -> HashMap<String, String> {
        let reqs = self.metrics.lock().unwrap();
        let r = reqs[0].resource_metrics[0].resource.as_ref().unwrap();
        r.attributes
            .iter()
            .map(|kv| (kv.key.clone(), text(kv.value.as_ref())))
            .collect()
    }
}

pub fn text(v: Option<&AnyValue>) -> String {
    match v.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

pub fn attrs(kvs: &[KeyValue]) -> HashMap<String, String> {
    kvs.iter()
        .map(|kv| (kv.key.clone(), text(kv.value.as_ref())))
        .collect()
}

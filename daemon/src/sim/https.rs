//! The simulator over TLS (`inferscope sim --tls-cert --tls-key`): an accept loop that runs
//! the TLS handshake on each connection and hands it to the same router as plain HTTP, with
//! HTTP/1.1 keep-alive and a graceful shutdown (open responses finish).

use std::{future::Future, io, sync::Arc, time::Duration};

use axum::Router;
use hyper_util::{rt::TokioIo, server::graceful::GracefulShutdown, service::TowerToHyperService};
use tokio::net::TcpListener;

/// A client that connects and says nothing gets this long to finish its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `app` over TLS on `listener` until `stop` completes, then waits for open
/// connections to finish their responses.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    tls: Arc<rustls::ServerConfig>,
    stop: impl Future<Output = ()>,
) -> io::Result<()> {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let graceful = GracefulShutdown::new();
    tokio::pin!(stop);
    loop {
        let tcp = tokio::select! {
            r = listener.accept() => match r {
                Ok((tcp, _)) => tcp,
                // Out of descriptors or a connection reset before accept: keep serving.
                Err(e) => {
                    tracing::debug!("sim: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        // Token streams are many small writes: do not let Nagle batch them.
        let _ = tcp.set_nodelay(true);
        let (acceptor, app, watcher) = (acceptor.clone(), app.clone(), graceful.watcher());
        tokio::spawn(async move {
            // A client that refuses our certificate ends the handshake: nothing to serve.
            let Ok(Ok(tls)) = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await
            else {
                return;
            };
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .serve_connection(TokioIo::new(tls), TowerToHyperService::new(app));
            let _ = watcher.watch(conn).await;
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

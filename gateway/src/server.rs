//! Accepting connections and draining them. One accept loop per listener: a `Semaphore`
//! caps open connections (past it, new ones wait in the kernel backlog, which is bounded),
//! hyper serves HTTP/1.1 with keep-alive, a header read timeout and a cap on the size of
//! a request head (so a slow connection pins little memory), and on stop the
//! listener closes, every connection is asked to finish its current request, and whatever
//! is still running after the grace period is aborted.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

use crate::api::reply::Body;
use crate::app::App;
use crate::metrics::CONNECTIONS;

/// Settings of one listener.
pub(crate) struct ServeOpts {
    pub(crate) max_connections: usize,
    pub(crate) header_timeout: Duration,
    /// Read buffer cap, which is the cap on a request head (431 past it).
    pub(crate) max_header_bytes: usize,
    pub(crate) grace: Duration,
}

/// Serves `listener` with `handler` until `stop` turns true, then drains.
pub(crate) async fn serve<H, F>(
    listener: TcpListener,
    app: Arc<App>,
    handler: H,
    opts: ServeOpts,
    mut stop: watch::Receiver<bool>,
) where
    H: Fn(Arc<App>, SocketAddr, Request<Incoming>) -> F + Copy + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(opts.max_connections));
    let graceful = GracefulShutdown::new();
    let mut conns = JoinSet::new();
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(opts.header_timeout)
        .max_buf_size(opts.max_header_bytes)
        .keep_alive(true);

    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => match slot {
                Ok(s) => s,
                Err(_) => break,
            },
            _ = crate::stopped(&mut stop) => break,
        };
        let accepted = tokio::select! {
            r = listener.accept() => r,
            // Reap finished connections while idle, so the set stays small.
            Some(_) = conns.join_next() => continue,
            _ = crate::stopped(&mut stop) => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let service = service_fn(move |req| {
            let app = app.clone();
            async move { Ok::<_, Infallible>(handler(app, peer, req).await) }
        });
        let conn = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        conns.spawn(async move {
            metrics::gauge!(CONNECTIONS).increment(1.0);
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            metrics::gauge!(CONNECTIONS).decrement(1.0);
            drop(slot);
        });
    }

    // New connections are refused from here on.
    drop(listener);
    let open = conns.len();
    if tokio::time::timeout(opts.grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(open, grace = ?opts.grace, "grace period over; aborting connections");
        conns.abort_all();
    }
    while conns.join_next().await.is_some() {}
}

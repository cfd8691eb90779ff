//! Accepting connections and draining them. One accept loop per listener: a `Semaphore`
//! caps open connections (past it, new ones wait in the kernel backlog, which is bounded),
//! hyper serves HTTP/1.1 with keep-alive, a header read timeout and a cap on the size of
//! a request head (so a slow connection pins little memory), and on stop the
//! listener closes, every connection is asked to finish its current request, and whatever
//! is still running after the grace period is aborted.
//!
//! Two more bounds keep a slot from being held forever by a client that sends but does
//! not read (pipelined requests whose answers pile up): a write that makes no progress for
//! `write_timeout` closes the connection, and a connection older than `max_age` is asked
//! to finish its current request and close (`Connection: close`), which also catches a
//! client reading just fast enough to dodge the write timeout.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::{service_fn, HttpService};
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tokio_io_timeout::TimeoutStream;

use crate::shutdown::stopped;

/// Settings of one listener.
#[derive(Debug, Clone)]
pub struct ServeOpts {
    /// Open connections at most; past it, new ones wait in the kernel backlog.
    pub max_connections: usize,
    pub header_timeout: Duration,
    /// Read buffer cap, which is the cap on a request head (431 past it).
    pub max_header_bytes: usize,
    /// A write to the client that makes no progress this long closes the connection.
    pub write_timeout: Duration,
    /// A connection this old finishes its current request and closes.
    pub max_age: Duration,
    /// How long a stop waits for requests in progress before aborting them.
    pub grace: Duration,
    /// Gauge of open connections, when the process exports one.
    pub connections_gauge: Option<&'static str>,
}

impl ServeOpts {
    /// Bounds for a light internal listener (metrics, probes, an admin API).
    pub fn internal(grace: Duration) -> Self {
        Self {
            max_connections: 64,
            header_timeout: Duration::from_secs(5),
            max_header_bytes: 16 * 1024,
            write_timeout: Duration::from_secs(5),
            max_age: Duration::from_secs(60),
            grace,
            connections_gauge: None,
        }
    }
}

/// Serves `listener` with `handler` (given `state` and the peer's address) until `stop`
/// turns true, then drains.
pub async fn serve<S, H, F, B>(
    listener: TcpListener,
    state: S,
    handler: H,
    opts: ServeOpts,
    mut stop: watch::Receiver<bool>,
) where
    S: Clone + Send + Sync + 'static,
    H: Fn(S, SocketAddr, Request<Incoming>) -> F + Copy + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let nodelay_inherited = nodelay_on_listener(&listener);
    let slots = Arc::new(Semaphore::new(opts.max_connections));
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
            _ = stopped(&mut stop) => break,
        };
        let accepted = tokio::select! {
            r = listener.accept() => r,
            // Reap finished connections while idle, so the set stays small.
            Some(_) = conns.join_next() => continue,
            _ = stopped(&mut stop) => break,
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
        if !nodelay_inherited {
            let _ = stream.set_nodelay(true);
        }
        let mut stream = TimeoutStream::new(stream);
        stream.set_write_timeout(Some(opts.write_timeout));
        let state = state.clone();
        let service = service_fn(move |req| {
            let state = state.clone();
            async move { Ok::<_, Infallible>(handler(state, peer, req).await) }
        });
        let conn = http.serve_connection(TokioIo::new(Box::pin(stream)), service);
        let (stop, max_age, gauge) = (stop.clone(), opts.max_age, opts.connections_gauge);
        conns.spawn(async move {
            if let Some(g) = gauge {
                metrics::gauge!(g).increment(1.0);
            }
            run_connection(conn, max_age, stop).await;
            if let Some(g) = gauge {
                metrics::gauge!(g).decrement(1.0);
            }
            drop(slot);
        });
    }

    // New connections are refused from here on; every connection saw `stop` and is
    // finishing its current request.
    drop(listener);
    drain(conns, opts.grace).await;
}

/// Serves one connection until it ends; past `max_age`, or once the server stops, it
/// finishes the request in progress (an idle connection closes at once), then closes.
async fn run_connection<I, S, B>(
    conn: http1::Connection<I, S>,
    max_age: Duration,
    mut stop: watch::Receiver<bool>,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    S: HttpService<Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut conn = std::pin::pin!(conn);
    let ended = tokio::select! {
        r = conn.as_mut() => Some(r),
        _ = tokio::time::sleep(max_age) => None,
        _ = stopped(&mut stop) => None,
    };
    let ended = match ended {
        Some(r) => r,
        None => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = ended {
        tracing::debug!(error = %e, "connection ended with an error");
    }
}

/// Waits up to `grace` for the connections to finish their requests, then aborts the rest.
async fn drain(mut conns: JoinSet<()>, grace: Duration) {
    let open = conns.len();
    let drained = async { while conns.join_next().await.is_some() {} };
    if tokio::time::timeout(grace, drained).await.is_err() {
        tracing::warn!(open, grace = ?grace, "grace period over; aborting connections");
        conns.abort_all();
    }
    while conns.join_next().await.is_some() {}
}

/// Sets `TCP_NODELAY` on the listener, which Linux copies into every socket it accepts:
/// one `setsockopt` per listener instead of one per connection (a rush of short
/// connections pays ~8 syscalls each; this was one of them). Elsewhere, or when the call
/// fails, returns false and each accepted socket gets its own call.
fn nodelay_on_listener(listener: &TcpListener) -> bool {
    cfg!(target_os = "linux")
        && socket2::SockRef::from(listener)
            .set_tcp_nodelay(true)
            .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn accepted_sockets_inherit_nodelay_from_the_listener() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        if !nodelay_on_listener(&listener) {
            return; // not Linux: every accepted socket sets it itself
        }
        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        assert!(
            accepted.nodelay().unwrap(),
            "TCP_NODELAY not inherited on accept"
        );
    }
}

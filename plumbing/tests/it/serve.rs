//! The accept loop on a real socket: a request is answered, and a stop lets the request in
//! progress finish before `serve` returns (within the grace period).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};
use plumbing::{serve, shutdown, ServeOpts};

async fn slow(
    delay: Duration,
    _peer: SocketAddr,
    req: Request<hyper::body::Incoming>,
) -> Response<Full<Bytes>> {
    if req.uri().path() == "/slow" {
        tokio::time::sleep(delay).await;
    }
    Response::new(Full::new(Bytes::from_static(b"done")))
}

fn get(addr: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_then_drains_the_request_in_progress() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop_tx, stop_rx) = shutdown::channel();
    let server = tokio::spawn(serve(
        listener,
        Duration::from_millis(300),
        slow,
        ServeOpts::internal(Duration::from_secs(5)),
        stop_rx,
    ));

    let fast = tokio::task::spawn_blocking(move || get(addr, "/"));
    assert!(fast.await.unwrap().ends_with("done"));

    let in_progress = tokio::task::spawn_blocking(move || get(addr, "/slow"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let t = Instant::now();
    stop_tx.send(true).unwrap();
    let answer = in_progress.await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        answer.ends_with("done"),
        "the request in progress finished: {answer}"
    );
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("serve returns after the drain")
        .unwrap();
    assert!(t.elapsed() < Duration::from_secs(5));
    assert!(
        TcpStream::connect(addr).is_err(),
        "the listener is closed after a stop"
    );
}

//! What several test modules share.

use std::net::SocketAddr;
use std::time::Duration;

use bench::stack::servers;

/// The baseline server (`bench/src/stack/baseline.rs`) in this process on a free port,
/// once it accepts connections: bare, or with one EVALSHA per answer to `redis`.
pub(crate) async fn baseline_server(redis: Option<String>) -> SocketAddr {
    let addr = free_addr();
    tokio::spawn(bench::stack::baseline::serve(addr, redis));
    wait_accepting(addr).await;
    addr
}

/// A free local address to serve on.
pub(crate) fn free_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], servers::free_port()))
}

/// Returns once `addr` accepts connections.
pub(crate) async fn wait_accepting(addr: SocketAddr) {
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("baseline server did not start on {addr}");
}

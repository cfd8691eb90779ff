//! Binding a listener with a backlog chosen for a rush.
//!
//! `tokio::net::TcpListener::bind` listens with a backlog of 128 (`ss -ltn` shows it in
//! Send-Q). At a sale's opening, 1 000 clients connecting at once overflowed it: the kernel
//! drops the handshake's last ACK of every connection past the queue
//! (`TcpExtListenOverflows`), the client believes it is connected and sends its request,
//! and that request is only accepted after a TCP retransmission, 200 ms to 1 s later.

use std::io;
use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpSocket};

/// Connections the kernel queues for `accept` unless configured otherwise. Linux caps it
/// at `net.core.somaxconn` (4 096 by default since 5.4).
pub const DEFAULT_BACKLOG: u32 = 4096;

/// Binds `addr` (address reuse on, as `TcpListener::bind` has it) and listens with
/// `backlog`.
pub fn bind(addr: SocketAddr, backlog: u32) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    #[cfg(unix)]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(backlog)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Connects `n` clients one after another to a listener that accepts none of them;
    /// how many got through. Past a full accept queue Linux drops the SYN, and the client
    /// only tries again after a second.
    async fn queued(listener: &TcpListener, n: usize) -> usize {
        let addr = listener.local_addr().unwrap();
        let mut open = Vec::new();
        for _ in 0..n {
            let c = tokio::net::TcpStream::connect(addr);
            match tokio::time::timeout(Duration::from_millis(500), c).await {
                Ok(Ok(s)) => open.push(s),
                _ => break,
            }
        }
        open.len()
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_burst_of_connections_waits_in_the_queue() {
        let somaxconn: usize = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(128);
        let burst = 300.min(somaxconn);
        let ours = bind("127.0.0.1:0".parse().unwrap(), DEFAULT_BACKLOG).unwrap();
        assert_eq!(queued(&ours, burst).await, burst);
        // The queue is what was asked for: a small one fills (one past the limit fits).
        let small = bind("127.0.0.1:0".parse().unwrap(), 16).unwrap();
        assert!(queued(&small, burst).await <= 17);
    }

    #[tokio::test]
    async fn binds_v6_and_serves() {
        let Ok(l) = bind("[::1]:0".parse().unwrap(), 64) else {
            return; // no IPv6 loopback here
        };
        let addr = l.local_addr().unwrap();
        let _c = tokio::net::TcpStream::connect(addr).await.unwrap();
        l.accept().await.unwrap();
    }
}

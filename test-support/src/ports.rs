//! Free-port picking. Tests run in parallel threads and processes, so each pick starts
//! from a per-process offset and also checks `port + 10000` (a cluster node's bus port).

use std::net::TcpListener;
use std::sync::atomic::{AtomicU16, Ordering};

static NEXT: AtomicU16 = AtomicU16::new(0);

fn free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// A loopback port (below 55535) that is free, and whose `+10000` bus port is free too.
pub fn free_port() -> u16 {
    let base = 20000 + (std::process::id() % 300) as u16 * 100;
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = 20000 + (base - 20000 + n) % 35000;
        if free(port) && free(port + 10000) {
            return port;
        }
    }
}

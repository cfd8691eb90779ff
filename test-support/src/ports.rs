//! Free-port picking. Tests run in parallel threads and processes, so each pick starts
//! from a per-process offset and also checks `port + 10000` (a cluster node's bus port).
//! Both stay below Linux's ephemeral range (32768 and up by default): a server a test
//! kills and restarts on the same port (`RedisServer::restart`) could otherwise find it
//! taken meanwhile as the local port of some client's outgoing connection, fail to bind,
//! and never answer (seen once in a full run: `replica::auto_remembers_a_replica_…`).

use std::net::TcpListener;
use std::sync::atomic::{AtomicU16, Ordering};

static NEXT: AtomicU16 = AtomicU16::new(0);

fn free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// First port handed out; ports run up to `FIRST + SPAN`, bus ports 10000 above them.
const FIRST: u16 = 10000;
const SPAN: u16 = 12000;

/// A loopback port (10000..22000) that is free, and whose `+10000` bus port is free too.
pub fn free_port() -> u16 {
    let offset = (std::process::id() % 120) as u16 * 100;
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = FIRST + (offset + n % SPAN) % SPAN;
        if free(port) && free(port + 10000) {
            return port;
        }
    }
}

//! Test guards that own real server processes started on free loopback ports: a single
//! `redis-server` (also with TLS, `TlsRedis`), a local Redis Cluster made with
//! `redis-cli --cluster create`, and MariaDB (see `mariadb`). Each guard kills what it
//! started when dropped.

pub mod mariadb;
mod ports;
mod redis_cluster;
mod redis_server;
mod redis_tls;

pub use ports::free_port;
pub use redis_cluster::RedisCluster;
pub use redis_server::RedisServer;
pub use redis_tls::TlsRedis;

use std::time::{Duration, Instant};

/// Polls `probe` until it returns true or `limit` passes; panics with `what` on timeout.
pub fn wait_until(what: &str, limit: Duration, mut probe: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !probe() {
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

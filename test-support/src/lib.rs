//! Test guards that own real server processes started on free loopback ports: a single
//! `redis-server` (also with TLS, `TlsRedis`), a local Redis Cluster made with
//! `redis-cli --cluster create`, and MariaDB (see `mariadb`). Each guard kills what it
//! started when dropped. Tests call the panicking constructors (`start`); the bench harness
//! calls the `try_` ones and reports a [`ServerError`] in one line. [`docs`] reads the
//! project's Markdown for the tests that hold it to the code.

mod certs;
pub mod docs;
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

/// Why a server could not be started.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("spawn {program}: {source} (is it installed?)")]
    Spawn {
        program: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("timed out after {after:?} waiting for {what}")]
    NotReady { what: String, after: Duration },
    #[error("{what}: {detail}")]
    Failed { what: String, detail: String },
}

/// Polls `probe` until it returns true or `limit` passes; panics with `what` on timeout.
pub fn wait_until(what: &str, limit: Duration, probe: impl FnMut() -> bool) {
    if let Err(e) = try_wait_until(what, limit, probe) {
        panic!("{e}");
    }
}

/// [`wait_until`] that returns the timeout as an error.
pub fn try_wait_until(
    what: &str,
    limit: Duration,
    mut probe: impl FnMut() -> bool,
) -> Result<(), ServerError> {
    let deadline = Instant::now() + limit;
    while !probe() {
        if Instant::now() >= deadline {
            return Err(ServerError::NotReady {
                what: what.to_owned(),
                after: limit,
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// Env var multiplying every timing bound a test asserts (`FG_TIME_FACTOR=3` on a machine
/// busy with other work); 1 when unset. Bounds catch hangs and lost wake-ups, not speed.
pub const ENV_TIME_FACTOR: &str = "FG_TIME_FACTOR";

/// A timing bound `d` under [`ENV_TIME_FACTOR`] (ignored unless a number in 1..=100).
pub fn slack(d: Duration) -> Duration {
    let factor = std::env::var(ENV_TIME_FACTOR)
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|f| (1.0..=100.0).contains(f))
        .unwrap_or(1.0);
    d.mul_f64(factor)
}

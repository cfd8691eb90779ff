//! What `/healthz` reports: whether MySQL and Redis each answered the last probe, and
//! whether every writer loop commits (a batch failing every attempt for `--writer-stall-ms`
//! is a consumer whose ledger stopped moving, though MySQL answers `SELECT 1`: read-only,
//! a full table, a bug).
//!
//! A background loop probes both every [`PROBE_INTERVAL`] (`SELECT 1` through the pool,
//! `PING` through the stock client), each bounded by [`PROBE_TIMEOUT`], and keeps the
//! answers in two flags and two gauges. `/healthz` reads the flags, so a flood of health
//! checks never reaches MySQL, and an idle consumer notices a dead database as promptly as
//! a busy one (the writer only learns of it when a batch fails).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use shard_router::StockClient;
use sqlx::MySqlPool;
use tokio::sync::watch;

use crate::metrics::{DB_UP, REDIS_UP};
use consumer::Stalls;

/// Period of the probes.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(1);
/// Bound on one probe: a server slower than this counts as down.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The last probes' answers; both start true (the service connected to both to start).
#[derive(Debug)]
pub struct Health {
    db: AtomicBool,
    redis: AtomicBool,
    writer: Stalls,
    /// How long a writer loop may fail before `/healthz` says so.
    stall_after: Duration,
    stalled: AtomicBool,
}

impl Health {
    pub fn new(writer: Stalls, stall_after: Duration) -> Self {
        Self {
            db: AtomicBool::new(true),
            redis: AtomicBool::new(true),
            writer,
            stall_after,
            stalled: AtomicBool::new(false),
        }
    }

    /// True while no writer loop has failed its batch for `--writer-stall-ms` (read now,
    /// not at the last probe: a stall shows as soon as it passes the bound).
    pub fn writer(&self) -> bool {
        let stalled = self.writer.longest();
        let ok = stalled < self.stall_after;
        if ok == self.stalled.swap(!ok, Ordering::Relaxed) {
            if ok {
                tracing::info!("the writer commits again; /healthz reports healthy");
            } else {
                tracing::error!(
                    ?stalled,
                    "a writer loop has not committed its batch; /healthz reports unhealthy"
                );
            }
        }
        ok
    }

    pub fn db(&self) -> bool {
        self.db.load(Ordering::Relaxed)
    }

    pub fn redis(&self) -> bool {
        self.redis.load(Ordering::Relaxed)
    }

    fn set(&self, db: bool, redis: bool) {
        if db != self.db.swap(db, Ordering::Relaxed) {
            if db {
                tracing::info!("mysql answers again");
            } else {
                tracing::warn!("mysql does not answer; /healthz reports unhealthy");
            }
        }
        if redis != self.redis.swap(redis, Ordering::Relaxed) {
            if redis {
                tracing::info!("redis answers again");
            } else {
                tracing::warn!("redis does not answer; /healthz reports unhealthy");
            }
        }
        metrics::gauge!(DB_UP).set(if db { 1.0 } else { 0.0 });
        metrics::gauge!(REDIS_UP).set(if redis { 1.0 } else { 0.0 });
    }
}

/// Probes MySQL and Redis until `shutdown`.
pub async fn run(
    health: Arc<Health>,
    pool: MySqlPool,
    client: StockClient,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(PROBE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = plumbing::shutdown::stopped(&mut shutdown) => return,
        }
        let db = ledger::health::ping(&pool, PROBE_TIMEOUT);
        let redis = async {
            matches!(
                tokio::time::timeout(PROBE_TIMEOUT, client.ping()).await,
                Ok(Ok(()))
            )
        };
        let (db, redis) = tokio::join!(db, redis);
        health.set(db, redis);
        health.writer.export();
        health.writer();
    }
}

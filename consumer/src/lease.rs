//! A shard's lease: one consumer owns a shard's stream at a time (`stream_offsets.owner`
//! and its epoch, `ledger/src/places.rs`). [`ShardLease`] is the lease as the shard's
//! reader (`shard.rs`), its renewer ([`renew_lease`]) and the writer share it; a renewal
//! that finds it taken, or a commit that finds the place moved, marks it lost.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ledger::places::{self, Place};
use shard_router::stream::ShardStream;
use shard_router::ShardId;
use sqlx::MySqlPool;
use tokio::sync::watch;

use crate::config::Config;

/// A shard's lease as its reader, its renewer and the writer share it.
#[derive(Debug, Clone)]
pub struct ShardLease {
    pub shard: ShardId,
    pub stream: Arc<str>,
    inner: Arc<LeaseState>,
}

#[derive(Debug, Default)]
struct LeaseState {
    /// The epoch held (0: none yet).
    epoch: AtomicU64,
    /// Set when the lease was found taken or the place moved: the reader starts again.
    lost: AtomicBool,
    /// The place last committed (for the lag gauge and the trim).
    committed: Mutex<Option<Place>>,
}

impl ShardLease {
    pub fn new(shard: ShardId, stream: &ShardStream) -> Self {
        Self {
            shard,
            stream: stream.key.as_str().into(),
            inner: Arc::default(),
        }
    }

    /// The epoch held now (0: none).
    pub fn epoch(&self) -> u64 {
        self.inner.epoch.load(Ordering::Acquire)
    }

    /// Marks the lease of `epoch` lost (a stale epoch changes nothing).
    pub fn lose(&self, epoch: u64) {
        if self.epoch() == epoch {
            self.inner.lost.store(true, Ordering::Release);
        }
    }

    pub(crate) fn lost(&self) -> bool {
        self.inner.lost.load(Ordering::Acquire)
    }

    /// True while a lease is held and not known lost: only then may this process trim to
    /// the place it committed (one it lost may be read under another master by now).
    pub fn held(&self) -> bool {
        self.epoch() > 0 && !self.lost()
    }

    /// Holds the lease of `epoch`, acquired at `at` (the reader, after acquiring it). The
    /// place is not recorded as this process's committed one yet: [`ShardLease::committed`]
    /// does that once the answers below it are final, so no trim runs ahead of them.
    pub fn hold(&self, epoch: u64, _at: &Place) {
        *self.committed_lock() = None;
        self.inner.lost.store(false, Ordering::Release);
        self.inner.epoch.store(epoch, Ordering::Release);
    }

    fn committed_lock(&self) -> std::sync::MutexGuard<'_, Option<Place>> {
        self.inner
            .committed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Records a committed place (the writer, after its commit).
    pub fn committed(&self, at: &Place) {
        *self.committed_lock() = Some(at.clone());
    }

    /// The place last committed, if any is known.
    pub fn committed_at(&self) -> Option<Place> {
        self.committed_lock().clone()
    }
}

/// Renews the lease of `epoch` every third of its length until `stop`; a renewal that
/// finds it taken marks it lost. A renewal MySQL does not answer is retried at the next
/// tick: the lease runs out only after three missed ones, and then the writer's commits
/// are refused by the epoch anyway if another consumer took it.
pub(crate) async fn renew_lease(
    pool: MySqlPool,
    cfg: Config,
    lease: ShardLease,
    epoch: u64,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(cfg.lease / 3);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = crate::signal::stopped(&mut stop) => return,
        }
        match places::renew(
            &pool,
            &lease.stream,
            &cfg.consumer_name,
            epoch,
            cfg.lease,
            cfg.db_timeout,
        )
        .await
        {
            Ok(true) => {}
            Ok(false) => {
                lease.lose(epoch);
                return;
            }
            Err(e) => {
                tracing::warn!(shard = lease.shard, error = %e, "shard lease not renewed; retrying")
            }
        }
    }
}

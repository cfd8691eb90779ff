//! Keeps a rebuild's fences alive while it runs: a rebuild that reads a large ledger (or
//! waits for the campaign row) may outlast its lease, and another rebuild would then take
//! the shards over and make this one's work void at its write. The renewal
//! (`lua/rebuild_renew.lua`) only extends a lease the token still holds: it never removes a
//! slice, so renewing a shard already written back changes nothing.

use std::time::Duration;

use shard_router::{ShardId, StockClient};
use tokio::task::JoinHandle;

/// Renews the fences of `token` every third of `lease` until dropped.
pub(super) struct Renewal {
    task: JoinHandle<()>,
}

impl Renewal {
    pub(super) fn start(
        client: StockClient,
        sku: u64,
        shards: Vec<ShardId>,
        token: String,
        lease: Duration,
    ) -> Self {
        let every = (lease / 3).max(Duration::from_millis(10));
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                for &shard in &shards {
                    match client.renew_rebuild(sku, shard, &token, lease).await {
                        Ok(_) => {}
                        // The write checks the token anyway; a missed renewal only risks
                        // a takeover, which the write then reports.
                        Err(e) => {
                            tracing::warn!(sku, shard, error = %e, "rebuild lease not renewed")
                        }
                    }
                }
            }
        });
        Self { task }
    }
}

impl Drop for Renewal {
    fn drop(&mut self) {
        self.task.abort();
    }
}

//! `replica` durability: after a successful claim, `WAIT 1 <ms>` on the claim's shard
//! (`StockClient::wait_replicas` routes it to the master owning the shard's slot).
//!
//! WAIT covers the writes of the connection it runs on, which is the multiplexed
//! connection that ran the script. Redis parks that connection while WAIT blocks, so replica
//! mode trades throughput for durability; `--wait-ms` bounds the stall. Claims of one shard
//! that finish while its WAIT is in flight share the next WAIT (`shard_router` batches them),
//! so the stall is paid per group of claims, not per claim. A claim whose copy
//! is not confirmed is not acknowledged (the caller answers 503 with the claim id): only
//! confirmed claims survive a failover, and only those may get a 201.

use std::time::{Duration, Instant};

use shard_router::{ShardId, StockClient};

use crate::metrics::{REDIS_SECONDS, REPLICATION_UNCONFIRMED};

/// Waits for one replica to acknowledge the writes so far on `shard`'s connection.
/// Returns whether one did; an error counts as "not confirmed".
pub(crate) async fn confirm(client: &StockClient, shard: ShardId, wait: Duration) -> bool {
    let started = Instant::now();
    let acked = client.wait_replicas(shard, 1, wait).await;
    metrics::histogram!(REDIS_SECONDS, "op" => "wait").record(started.elapsed().as_secs_f64());
    let ok = matches!(acked, Ok(n) if n >= 1);
    if !ok {
        metrics::counter!(REPLICATION_UNCONFIRMED).increment(1);
        if let Err(e) = acked {
            let trace_id = crate::access::trace_id();
            tracing::warn!(error = %e, shard, trace_id = %trace_id, "WAIT after a claim failed");
        }
    }
    ok
}

//! `replica` durability. Each claim pipeline ends with `WAIT <replicas> <--wait-ms>`, where
//! `<replicas>` is every replica the shard's master counted online at the last probe (at
//! least one), then `INFO replication`: a batch acknowledged by fewer than every replica
//! online by then is unconfirmed (`shard-router/src/batch.rs`). The WAIT runs on the
//! connection that ran the batch's scripts, so the count covers exactly those writes; a
//! reconnect between script and WAIT fails the pipeline (an ambiguous 503), never
//! confirms. Claims that queue while a shard's batch is in flight share the next batch's
//! WAIT, so the stall is paid per group of claims. A rerouted claim needs its hold, take
//! and settle confirmed (`shard_router::protocol::claim`; the decision is
//! `shard_router::decision`). A claim whose copy is not confirmed is not acknowledged (the
//! caller answers 503 with the claim id): only confirmed claims survive a failover, and
//! only those may get a 201.

use crate::metrics::REPLICATION_UNCONFIRMED;

/// Counts a claim not acknowledged because no replica confirmed it
/// (`shard_router::decision::Decision::Unconfirmed`).
pub(crate) fn count_unconfirmed() {
    metrics::counter!(REPLICATION_UNCONFIRMED).increment(1);
}

//! `replica` durability. Each claim pipeline ends with `WAIT 1 <--wait-ms>` (see
//! `shard-router/src/batch.rs`), on the connection that ran its scripts, so the count
//! covers exactly those writes; a reconnect between script and WAIT fails the pipeline
//! (an ambiguous 503), never confirms. Claims that queue while a shard's batch is in flight
//! share the next batch's WAIT, so the stall is paid per group of claims. A rerouted claim
//! needs its hold, take and settle confirmed (`shard_router::protocol::claim_confirmed`).
//! A claim whose copy is not confirmed is not acknowledged (the caller answers 503 with the
//! claim id): only confirmed claims survive a failover, and only those may get a 201.

use shard_router::protocol::Confirmation;

use crate::metrics::REPLICATION_UNCONFIRMED;

/// True unless replica durability is on and did not confirm; counts the misses.
pub(crate) fn acknowledgeable(confirmation: Confirmation) -> bool {
    let ok = confirmation.acknowledgeable();
    if !ok {
        metrics::counter!(REPLICATION_UNCONFIRMED).increment(1);
    }
    ok
}

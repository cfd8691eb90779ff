//! Rerouted claims' replay answers made final once their records are in the ledger.
//!
//! A gateway with replica durability stores a rerouted claim's answer (on the home shard)
//! *tentative* until the take is known to be on a replica of the shard that took it; a
//! replay of a tentative answer looks for the record in that shard's stream
//! (`shard-router/src/replay.rs`). Once the entry is trimmed, only a final answer can be
//! replayed, so the writer calls [`finalize_records`] after the commit and before its
//! loop trims the shard (a shard's commits and trims are one writer loop's, in order).
//! The reader committed only what a replica of the taking shard holds (`replica.rs`),
//! which is exactly what a final answer promises.
//!
//! A call that fails is retried a few times, then left: the entry is trimmed anyway (the
//! ledger has it), and a replay of that request id answers 503 (unconfirmed), never a
//! false success. So does a replay whose committing consumer died between its commit and
//! this call: the next owner reads after the committed place and does not see the record
//! again.

use std::time::Duration;

use shard_router::{Claim, ClaimRecord, StockClient};

/// Attempts per answer, and the pause between them. The answers of one batch are made
/// final concurrently, so a home master that does not answer holds the batch's
/// acknowledgement up for about `ATTEMPTS` response timeouts, not that per record.
const ATTEMPTS: usize = 2;
const PAUSE: Duration = Duration::from_millis(50);

/// Makes the answers of the committed rerouted records final. Records without a request
/// id, or taken on their home shard, have nothing to do.
pub(crate) async fn finalize_records<'a>(
    client: &StockClient,
    records: impl Iterator<Item = &'a ClaimRecord>,
) {
    let rerouted = records.filter(|r| r.shard != r.home && r.request_id.is_some());
    futures::future::join_all(rerouted.map(|r| async move {
        let rid = r.request_id.as_deref().unwrap_or_default();
        let claim = Claim {
            claim_id: r.claim_id.clone(),
            sku: r.sku,
            shard: r.shard,
            qty: r.qty,
        };
        for attempt in 1..=ATTEMPTS {
            match client.finalize_answer(r.home, &r.user, rid, &claim).await {
                Ok(_) => return,
                Err(e) if attempt == ATTEMPTS => {
                    tracing::warn!(claim = %r.claim_id, error = %e, "replay answer left tentative");
                }
                Err(_) => tokio::time::sleep(PAUSE).await,
            }
        }
    }))
    .await;
}

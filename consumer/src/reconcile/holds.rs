//! Stale holds: resolved against the ledger and the streams before each measurement.

use std::collections::HashMap;
use std::time::Duration;

use shard_router::{Claim, ClaimRecord, SettleOutcome, Settlement, StockClient};
use sqlx::MySqlPool;

use crate::db::bounded;
use crate::error::ConsumerError;
use crate::metrics as m;
use crate::rebuild::in_flight;
use crate::stream::ShardStream;

/// Holds past their expiry were left by a gateway that died between hold and settle. The
/// claim `(sku, user, user_seq)` in the ledger or in a stream means units were taken: keep
/// the count; otherwise nothing was taken: undo it. "In a stream" includes the dead
/// letters: a claim parked there is acknowledged all the same.
pub async fn resolve_stale_holds(
    pool: &MySqlPool,
    client: &StockClient,
    streams: &[ShardStream],
    sku: u64,
    shards: &[u16],
    now_ms: i64,
    t: Duration,
) -> Result<usize, ConsumerError> {
    let mut stale = Vec::new();
    for &home in shards {
        for h in client.holds(sku, home).await? {
            if h.expires_ms < now_ms {
                stale.push((home, h.user, h.user_seq, h.request_id));
            }
        }
    }
    if stale.is_empty() {
        return Ok(0);
    }
    let pending: HashMap<(String, u64), ClaimRecord> = in_flight(client, streams, sku)
        .await?
        .into_iter()
        .map(|r| ((r.user.clone(), r.user_seq), r))
        .collect();
    let mut resolved = 0;
    for (home, user, seq, rid) in stale {
        let found: Option<(String, u16, u32)> = bounded(
            "find held claim",
            t,
            sqlx::query_as("SELECT claim_id, shard, qty FROM claims WHERE sku = ? AND user_id = ? AND user_seq = ?")
                .bind(sku)
                .bind(&user)
                .bind(seq)
                .fetch_optional(pool),
        )
        .await?;
        let found = found.or_else(|| {
            pending
                .get(&(user.clone(), seq))
                .map(|r| (r.claim_id.clone(), r.shard, r.qty))
        });
        let how = match found {
            Some((claim_id, shard, qty)) => Settlement::Keep(Claim {
                claim_id,
                sku,
                shard,
                qty,
            }),
            None => Settlement::Undo,
        };
        let out = client
            .settle(sku, home, &user, seq, rid.as_deref(), &how)
            .await?;
        if matches!(out, SettleOutcome::Settled { .. }) {
            resolved += 1;
            metrics::counter!(m::STALE_HOLDS).increment(1);
            tracing::warn!(sku, user = %user, seq, keep = matches!(how, Settlement::Keep(_)), "stale hold resolved");
        }
    }
    Ok(resolved)
}

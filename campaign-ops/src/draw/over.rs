//! A draw at close-out. The entrants and the top-K go with the campaign's other keys, but
//! a draw SKU's request still reaches `draw_enter.lua` for as long as the SKU metadata stays
//! (`closeout::retire`). So before they go, each shard keeps its winners from the ledger
//! and its meta in state `over`, both expiring after `ttl`: a winner is still told its
//! claim, anyone else that the draw is over, never that the draw is missing (a 503).

use std::time::Duration;

use ledger::campaigns::Campaign;
use ledger::draws;
use shard_router::{StockClient, GRANT_REQUEST};
use sqlx::MySqlPool;

use crate::OpsError;

/// Keeps `c`'s winners' answers on its shards (nothing for a campaign that is no draw).
/// Idempotent: a close-out retried after a crash writes the same answers again.
pub async fn keep_answers(
    pool: &MySqlPool,
    client: &StockClient,
    c: &Campaign,
    ttl: Duration,
    t: Duration,
) -> Result<(), OpsError> {
    if draws::get(pool, c.sku, t).await?.is_none() {
        return Ok(());
    }
    // Every win the ledger knows, a released one included: while the campaign ran its
    // winner was told `won` with that claim too (`run::mark_shard` writes the same list).
    let wins = draws::wins(pool, c.sku, GRANT_REQUEST, t).await?;
    let placement = client.placement();
    for shard in placement.shards_of(c.sku, c.width) {
        let mine: Vec<_> = wins
            .iter()
            .filter(|(user, _, _)| placement.home_shard(c.sku, c.width, user) == shard)
            .cloned()
            .collect();
        client.draw_over(shard, c.sku, &mine, ttl).await?;
    }
    Ok(())
}

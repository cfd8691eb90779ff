//! Step 4 of the draw (`super::run`): each shard's wins and ranks marked, its state
//! `drawn`, and the seed revealed in the SKU metadata.

use std::time::Duration;

use ledger::campaigns::Campaign;
use ledger::draws;
use shard_router::draw::{DrawState, MarkBatch};
use shard_router::{ShardId, StockClient, GRANT_REQUEST};
use sqlx::MySqlPool;

use super::run::PAGE;
use crate::OpsError;

/// Step 4 on every shard not marked yet, and the seed revealed.
pub(super) async fn mark(
    pool: &MySqlPool,
    client: &StockClient,
    c: &Campaign,
    t: Duration,
) -> Result<(), OpsError> {
    let mut any = false;
    for shard in client.placement().shards_of(c.sku, c.width) {
        // Missing (lost): the restore opens it, puts the entries back and marks it.
        match client.draw_state(shard, c.sku).await? {
            Some(DrawState::Closed) => {}
            // Open after the draw: a failover rolled it back past its close. Closed first,
            // so no entry lands after the ranks are marked.
            Some(DrawState::Open) => {
                client.draw_close(shard, c.sku).await?;
            }
            Some(DrawState::Drawn | DrawState::Over) | None => continue,
        }
        mark_shard(pool, client, c, shard, None, t).await?;
        any = true;
    }
    // Also when every shard is marked but the metadata still hides the seed: a pass that
    // died between its last mark and this write left it so. Metadata that is missing is
    // the rebuild's to write (from the ledger, with the seed).
    let unrevealed = client
        .sku_meta(c.sku)
        .await?
        .is_some_and(|m| m.mode.draw().is_some_and(|d| d.seed.is_none()));
    if any || unrevealed {
        let meta = crate::sku::meta_of(pool, c, t).await?;
        client.write_sku_meta(&meta).await?;
    }
    Ok(())
}

/// Writes the wins and the ranks of the users whose home is `shard`, then its state
/// `drawn`. `held`: the restore's token, on a shard it holds, which gives the state itself
/// (a held shard refuses the draw loop's marks: `lua/draw_mark.lua`); then the number of
/// mark batches written under it, or `None` when the shard is not held under it any more.
pub async fn mark_shard(
    pool: &MySqlPool,
    client: &StockClient,
    c: &Campaign,
    shard: ShardId,
    held: Option<u64>,
    t: Duration,
) -> Result<Option<u32>, OpsError> {
    // The wins first: the marks never overwrite one, and a winner asking between the two
    // is told `won`, not `won_pending` (the grant's stored answer may be gone). Here and
    // not only in the restore: a restore that read the draw still open, then saw it drawn
    // and granted and the shard lost again, opens it with no wins, and this is the mark
    // that follows (found by the draw model, `two_losses_leave_no_winner_pending`).
    for (user, claim_id, from) in draws::wins(pool, c.sku, GRANT_REQUEST, t).await? {
        if client.placement().home_shard(c.sku, c.width, &user) == shard {
            client
                .draw_won(c.sku, c.width, &user, &claim_id, from)
                .await?;
        }
    }
    let mut mine: Vec<(String, u32)> = Vec::new();
    let mut after = 0;
    loop {
        let page = draws::ranks(pool, c.sku, after, PAGE, t).await?;
        let Some(last) = page.last() else { break };
        after = last.rank;
        let full = page.len() == PAGE as usize;
        mine.extend(
            page.into_iter()
                .filter(|r| client.placement().home_shard(c.sku, c.width, &r.user) == shard)
                .map(|r| (r.user, r.rank)),
        );
        if !full {
            break;
        }
    }
    let mut chunks = mine.chunks(PAGE as usize).peekable();
    if chunks.peek().is_none() && held.is_none() {
        client.draw_mark(shard, c.sku, &[], MarkBatch::Last).await?;
    }
    let mut written = 0;
    while let Some(chunk) = chunks.next() {
        let batch = match (held, chunks.peek()) {
            (Some(token), _) => MarkBatch::Held(token),
            (None, None) => MarkBatch::Last,
            (None, Some(_)) => MarkBatch::More,
        };
        let marked = client.draw_mark(shard, c.sku, chunk, batch).await?;
        if held.is_some() && !marked {
            return Ok(None);
        }
        written += 1;
    }
    Ok(Some(written))
}

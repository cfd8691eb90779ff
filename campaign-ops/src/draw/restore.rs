//! A shard whose draw Redis lost (a restart without persistence, a failover that rolled
//! back past its opening) gets it back from the ledger: the draw opened again, the
//! entrants and the top-K from `draw_entries`, and, once drawn, the ranks from
//! `draw_ranks`. The entries stream's lost tail is not the ledger's: with durability
//! `none` an entry acknowledged and lost before its commit is gone, as a claim is.

use std::time::Duration;

use ledger::campaigns::Campaign;
use ledger::draws::{self, Draw};
use shard_router::draw::DrawState;
use shard_router::{ShardId, StockClient};
use sqlx::MySqlPool;
use tokio::sync::watch;

use crate::OpsError;

/// Entries put back per script call.
const PAGE: u32 = 500;

/// Every few seconds: each live draw's shards, restored where their draw is missing.
pub async fn run(
    pool: MySqlPool,
    client: StockClient,
    t: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(Duration::from_secs(2));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = plumbing::shutdown::stopped(&mut shutdown) => break,
        }
        let live = match draws::live(&pool, t).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "draw restore: list draws failed");
                continue;
            }
        };
        for l in live {
            if let Err(e) = check(&pool, &client, l.draw.sku, t).await {
                tracing::warn!(sku = l.draw.sku, error = %e, "draw restore failed");
            }
        }
    }
}

/// Restores the draw of `sku` on every shard that lost it, once the SKU is preheated (its
/// metadata written: before that there is nothing to restore, only to open).
pub async fn check(
    pool: &MySqlPool,
    client: &StockClient,
    sku: u64,
    t: Duration,
) -> Result<(), OpsError> {
    if client.sku_meta(sku).await?.is_none() {
        return Ok(());
    }
    let c = ledger::campaigns::get(pool, sku, t).await?;
    super::open(pool, client, &c, t).await
}

/// Opens the draw on `shard` and puts back what the ledger holds of it. The shard is held
/// (no state) until everything is back: an entrant asking in between is told to come back
/// (NOT_PREHEATED), where an open state would enter them a second time and a drawn one
/// tell a winner whose mark is not back yet `lost`. A restore that dies on the way leaves
/// the shard without a state, so the next pass does it again. Each write of the restore
/// counts itself in the hold, and the state is given only where the count is this
/// restore's: a replica promoted mid-restore holds a prefix of those writes, and is
/// restored again rather than published with entrants or marks missing.
pub async fn shard(
    pool: &MySqlPool,
    client: &StockClient,
    c: &Campaign,
    d: &Draw,
    shard: ShardId,
    t: Duration,
) -> Result<(), OpsError> {
    let spec = super::spec(c, d);
    let token = rand::random::<u64>();
    if !client.draw_hold(shard, &spec, token).await? {
        // A state since the restore found it lost: another restore's, or close-out's
        // `over`, which the pages must not bring entrants back into.
        return Ok(());
    }
    let mut after: Option<String> = None;
    let mut restored = 0u64;
    let mut writes = 0u32;
    loop {
        let page = draws::entries_of_shard(pool, c.sku, shard, after.as_deref(), PAGE, t).await?;
        let Some(last) = page.last() else { break };
        after = Some(last.user.clone());
        let Some(n) = client
            .draw_restore(shard, c.sku, token, &page_args(&page))
            .await?
        else {
            not_published(c, shard);
            return Ok(());
        };
        restored += n;
        writes += 1;
        if page.len() < PAGE as usize {
            break;
        }
    }
    let state = if d.state == draws::DrawState::Drawn {
        // The wins, then the marks.
        let Some(marks) = super::run::mark_shard(pool, client, c, shard, Some(token), t).await?
        else {
            not_published(c, shard);
            return Ok(());
        };
        writes += marks;
        DrawState::Drawn
    } else if client.redis_time_ms(shard).await? >= d.draw_at_ms {
        // Past the draw time (by this shard's clock, the one the draw loop closes by) a
        // draw the ledger still has open comes back closed: reopened, it would take
        // entries from a gateway whose clock is behind after the other shards closed.
        DrawState::Closed
    } else {
        DrawState::Open
    };
    if client
        .draw_publish(shard, &spec, state, token, writes)
        .await?
    {
        tracing::info!(sku = c.sku, shard, restored, "draw restored on a shard");
    } else {
        not_published(c, shard);
    }
    Ok(())
}

/// A page of the ledger's entries as `draw_restore.lua` takes them: `(user, priority,
/// stream entry id)`; the ledger's entry id is `<shard>-<stream id>`, the shard keeps the
/// stream id.
pub fn page_args(page: &[draws::Entry]) -> Vec<(String, u64, String)> {
    page.iter()
        .map(|e| {
            let id = e
                .entry_id
                .split_once('-')
                .map_or(e.entry_id.as_str(), |(_, id)| id);
            (e.user.clone(), e.priority, id.to_owned())
        })
        .collect()
}

/// The shard was lost again, failed over to a replica missing part of this restore, or
/// is held by another restore: the next pass restores it (it still has no state).
fn not_published(c: &Campaign, shard: ShardId) {
    tracing::warn!(
        sku = c.sku,
        shard,
        "draw restore not published (lost, failed over or taken over since); next pass"
    );
}

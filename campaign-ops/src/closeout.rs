//! Campaign close-out: once the sale window and the payment timeout are over and every claim
//! is settled, the campaign's final reconciliation is stored as its closing report, its Redis
//! keys are removed, its series leave `/metrics`, and it is never reconciled again.
//!
//! Steps, each idempotent, so a crash anywhere is finished by the next attempt:
//! 1. refuse unless ended + payment timeout passed, no claim pending or releasing, no entry
//!    of the SKU in flight, no hold (a live campaign is never touched);
//! 2. `closing_ms` set (from then on no reconciliation, wave or preheat of the SKU);
//! 3. the fence: each shard's meta removed, so no script takes a unit any more (whatever a
//!    gateway's clock says); step 1's checks again, now final (a claim that got in before
//!    the fence is committed and settled first; the loop retries);
//! 4. the final reconciliation stored as `closing_report`, only if none is stored yet (a
//!    retry after a crash in step 5 would measure a half-removed Redis);
//! 5. a draw's winners' answers kept (`draw::over`), then the Redis keys removed: per shard
//!    a draw's entrants and top-K, the user counts, `useq`, holds, release sets, waves, fix
//!    epoch, and the slice last;
//! 6. `closed_ms` set; the per-SKU series forgotten. A claim released after that is
//!    released in the ledger only (`release.rs`): there is no Redis stock left to return to.
//!
//! What stays: the stored answers of request ids (`{T}:req:…`), which expire by their own
//! TTL, a draw's meta (state `over`) and winners, which expire a little later
//! (`draw_answers_ttl`), and, as long as one of them may still be there, the SKU's
//! metadata `fg:sku:<sku>` and its place in the live set `fg:skus`. Invariant `replay`
//! (docs/DESIGN.md) promises a retried success its first answer that long, and a gateway
//! reaches its replay check only for a SKU it knows: with the metadata it sees the window
//! closed, answers a retry from the stored answer and anything else `ended`. [`retire`]
//! removes both once the answers are gone (the consumer's housekeeping runs it).

use std::time::Duration;

use shard_router::StockClient;
use sqlx::MySqlPool;

use crate::reconcile;
use crate::OpsError;

pub use ledger::campaigns::{
    closing_campaigns, due, is_closing, lifecycle, open_campaigns, refuse_if_closed, Lifecycle,
};

/// Why a campaign cannot close yet; `None` when it can.
async fn not_yet(
    pool: &MySqlPool,
    client: &StockClient,
    c: &ledger::campaigns::Campaign,
    now_ms: i64,
    t: Duration,
) -> Result<Option<String>, OpsError> {
    let over = c.end_ms + i64::from(c.payment_timeout_s) * 1000;
    if now_ms < over {
        return Ok(Some(format!(
            "its window and payment timeout run until {over} ms ({} s from now)",
            (over - now_ms) / 1000
        )));
    }
    let open = ledger::closing::open_claims(pool, c.sku, t).await?;
    if open > 0 {
        return Ok(Some(format!(
            "{open} claim(s) are pending or releasing (the release sweep settles them)"
        )));
    }
    let (r, _) = reconcile::measure(pool, client, c.sku, t).await?;
    if r.in_flight > 0 || r.held > 0 {
        return Ok(Some(format!(
            "{} unit(s) in flight and {} under holds are not in the ledger yet",
            r.in_flight, r.held
        )));
    }
    Ok(None)
}

/// Added to the request TTL before [`retire`] takes a closed SKU's metadata: an answer can
/// still be stored (a second chance settling) during the close-out round whose start time
/// became `closed_ms`, up to that round's final checks, each of them bounded far below this.
pub const RETIRE_MARGIN: Duration = Duration::from_secs(600);

/// How long a closed-out draw keeps its winners' answers (`draw::over`): one
/// [`RETIRE_MARGIN`] past the time [`retire`] may take the SKU's metadata, so a housekeeping
/// round late by less than that still finds the answers behind the metadata.
fn draw_answers_ttl(client: &StockClient) -> Duration {
    client.config().request_ttl + 2 * RETIRE_MARGIN
}

/// Removes the metadata and the live-set membership of every campaign closed long enough
/// ago that no stored answer of it can be left: no script writes or refreshes one after
/// the fence, so each expires within the request TTL of `closed_ms` (plus
/// [`RETIRE_MARGIN`]). Returns the SKUs retired now; idempotent (a retired SKU is no
/// longer in the live set, which is the mark).
pub async fn retire(
    pool: &MySqlPool,
    client: &StockClient,
    now_ms: i64,
    t: Duration,
) -> Result<Vec<u64>, OpsError> {
    let keep = (client.config().request_ttl + RETIRE_MARGIN).as_millis() as i64;
    let expired = ledger::closing::closed_before(pool, now_ms.saturating_sub(keep), t).await?;
    if expired.is_empty() {
        return Ok(Vec::new());
    }
    let live: std::collections::HashSet<u64> = client.skus().await?.into_iter().collect();
    let mut retired = Vec::new();
    for sku in expired.into_iter().filter(|s| live.contains(s)) {
        client.forget_sku(sku).await?;
        tracing::info!(
            sku,
            "closed campaign retired: its replay answers have expired"
        );
        retired.push(sku);
    }
    Ok(retired)
}

/// Closes `sku` (see the module doc). Returns the closing report.
pub async fn close(
    pool: &MySqlPool,
    client: &StockClient,
    sku: u64,
    now_ms: i64,
    t: Duration,
) -> Result<serde_json::Value, OpsError> {
    let c = ledger::campaigns::get(pool, sku, t).await?;
    let life = lifecycle(pool, sku, t).await?;
    if life.closing_ms.is_none() {
        if let Some(why) = not_yet(pool, client, &c, now_ms, t).await? {
            return Err(OpsError::Invalid(format!(
                "sku {sku} cannot close yet: {why}"
            )));
        }
        ledger::closing::mark_closing(pool, sku, now_ms, t).await?;
    }
    if life.closing_report.is_none() {
        // Fence first: without the shard metas, claim.lua and take.lua refuse (a gateway whose
        // clock is behind could otherwise still sell after the end). The slices stay, so
        // releases of claims taken before the fence still return their units.
        client.stop_sales(sku, c.width).await?;
        // The reconcile loop no longer runs for the SKU: resolve holds crashed gateways left.
        let shards = client.placement().shards_of(sku, c.width);
        let streams: Vec<_> = shards
            .iter()
            .map(|&s| shard_router::stream::ShardStream::new(client, s))
            .collect();
        // The closing report must not count on a resolution a failover can take back: wait
        // until a replica holds it (the default replica policy; close-out has no config).
        let replicas = consumer::replica::ReplicaWait::default();
        let holds = reconcile::holds::resolve_stale_holds(
            pool, client, &streams, sku, &shards, now_ms, t, replicas,
        )
        .await?;
        if holds.unconfirmed > 0
            || !reconcile::holds::on_replicas(client, &shards, replicas).await?
        {
            return Err(OpsError::Invalid(format!(
                "sku {sku} is closing, sales are stopped; waiting: stale-hold resolutions \
                 not on a replica yet"
            )));
        }
        if let Some(why) = not_yet(pool, client, &c, now_ms, t).await? {
            return Err(OpsError::Invalid(format!(
                "sku {sku} is closing, sales are stopped; waiting: {why}"
            )));
        }
        let (report, _) = reconcile::measure(pool, client, sku, t).await?;
        let text = serde_json::to_string(&report).unwrap_or_default();
        ledger::closing::store_report(pool, sku, &text, t).await?;
    }
    crate::draw::over::keep_answers(pool, client, &c, draw_answers_ttl(client), t).await?;
    client.remove_campaign_keys(sku, c.width).await?;
    ledger::closing::mark_closed(pool, sku, now_ms, t).await?;
    reconcile::forget_metrics(sku);
    let life = lifecycle(pool, sku, t).await?;
    tracing::info!(sku, report = ?life.closing_report, "campaign closed");
    Ok(serde_json::to_value(life).unwrap_or_default())
}

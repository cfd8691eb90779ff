//! Campaign administration: MySQL is the source of truth for a campaign; preheat copies it
//! into Redis and never overwrites a live slice.

use std::time::Duration;

use ledger::LedgerError;
use serde::Serialize;
use shard_router::{PreheatOutcome, StockClient};
use sqlx::MySqlPool;

use crate::OpsError;
use consumer::replica::ReplicaWait;

pub use crate::sku::meta;
pub use ledger::campaigns::{get, list, put, Campaign};

/// [`put`] for operators (CLI and admin API): refuses a stock change once the SKU is
/// preheated. Preheat never overwrites a live slice, so a new stock would reach the ledger
/// but not Redis, and Redis would keep selling the old one.
pub async fn put_checked(
    pool: &MySqlPool,
    client: &StockClient,
    c: &Campaign,
    shards: u16,
    t: Duration,
) -> Result<(), OpsError> {
    match get(pool, c.sku, t).await {
        Ok(old) if old.stock != c.stock => {
            let live = client
                .slices(c.sku, old.width)
                .await?
                .iter()
                .any(|(_, slice)| slice.is_some());
            if live {
                return Err(OpsError::Invalid(format!(
                    "sku {} is preheated: its stock {} cannot change to {} (live slices are never overwritten)",
                    c.sku, old.stock, c.stock
                )));
            }
        }
        Ok(_) | Err(LedgerError::NotFound(_)) => {}
        Err(e) => return Err(e.into()),
    }
    Ok(put(pool, c, shards, t).await?)
}

/// How a campaign sells, chosen at its creation (CLI `--mode`, admin API `mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sale {
    Fcfs,
    /// A verifiable draw at `draw_at_ms`, `waitlist` entrants ranked past the stock.
    Draw {
        draw_at_ms: i64,
        waitlist: u32,
    },
    /// A waiting room in front of first come, first served.
    Queue,
}

impl Sale {
    pub fn mode(self) -> ledger::draws::Mode {
        match self {
            Sale::Fcfs => ledger::draws::Mode::Fcfs,
            Sale::Draw { .. } => ledger::draws::Mode::Draw,
            Sale::Queue => ledger::draws::Mode::Queue,
        }
    }
}

/// [`put_checked`] in a mode: refuses a change of mode once the campaign is preheated or
/// once it is a draw or a queue, then stores the campaign and its draw or its queue.
pub async fn put_sale(
    pool: &MySqlPool,
    client: &StockClient,
    c: &Campaign,
    sale: Sale,
    shards: u16,
    t: Duration,
) -> Result<(), OpsError> {
    if let Sale::Draw {
        draw_at_ms,
        waitlist,
    } = sale
    {
        crate::draw::check_time(c, draw_at_ms)?;
        // Refused before the campaign row changes, not after.
        ledger::draws::check_terms(pool, c.sku, draw_at_ms, waitlist, t).await?;
    }
    c.validate(shards)?;
    crate::draw::check_mode(pool, client, c, sale.mode(), t).await?;
    put_checked(pool, client, c, shards, t).await?;
    match sale {
        Sale::Draw {
            draw_at_ms,
            waitlist,
        } => {
            crate::draw::create(pool, c, draw_at_ms, waitlist, t).await?;
        }
        Sale::Queue => ledger::queues::create(pool, c.sku, t).await?,
        Sale::Fcfs => {}
    }
    Ok(())
}

/// Preheats Redis from the stored campaign; live slices are left as they are. Once the
/// ledger holds claims of the SKU, or a slice is missing (a first preheat, or a loss), the
/// full split could refill sold stock: then this is the rebuild from the ledger
/// (`rebuild.rs`) instead. Only when every slice is live and the ledger holds no claim is
/// it the plain preheat (limit and window updated, nothing created).
///
/// A slice missing with an empty ledger and generation 0 is either a first preheat or a
/// loss while a consumer still holds the campaign's first batch in memory; nothing tells
/// the two apart. The rebuild path writes the split fenced, under the campaign row, with
/// generation 1, so records claimed before it (generation 0) that commit later are counted
/// as late claims. No flush handshake and no quiesce then: with generation 0 no preheat
/// of this version ran before, so no consumer holds records (a campaign preheated by an
/// older version aside, whose records are still caught as late).
pub async fn preheat(
    pool: &MySqlPool,
    client: &StockClient,
    sku: u64,
    t: Duration,
) -> Result<Vec<(u16, PreheatOutcome)>, OpsError> {
    preheat_with(pool, client, sku, ReplicaWait::default(), t).await
}

/// [`preheat`] whose rebuild waits for replicas under `replicas` (`--replica-wait`: the
/// rebuild confirms its write, `rebuild.rs` step 5); `OpsError::Unconfirmed` when none
/// did: written, retryable (a preheat again finds the slices live, or rebuilds again).
pub async fn preheat_with(
    pool: &MySqlPool,
    client: &StockClient,
    sku: u64,
    replicas: ReplicaWait,
    t: Duration,
) -> Result<Vec<(u16, PreheatOutcome)>, OpsError> {
    let c = get(pool, sku, t).await?;
    let all_live = client
        .slices(sku, c.width)
        .await?
        .iter()
        .all(|(_, v)| v.is_some());
    if all_live && !crate::rebuild::any_claim(pool, sku, t).await? {
        let meta = crate::sku::meta_of(pool, &c, t).await?;
        // A draw's shards before the metadata, which tells gateways the mode.
        crate::draw::open(pool, client, &c, t).await?;
        let out = client.preheat(&meta).await?;
        if !out
            .iter()
            .any(|(_, o)| matches!(o, PreheatOutcome::Rebuilding))
        {
            return Ok(out);
        }
    }
    let mut opts = crate::rebuild::Options::new(t);
    opts.replica_wait = replicas;
    let first = !crate::rebuild::ledger_has_claims(pool, sku, t).await?;
    if first {
        opts.quiesce = Duration::ZERO;
        opts.flush_wait = Duration::ZERO;
        // As `StockClient::preheat` does: a shard never vouched for gets its vouch before
        // its first slice, so no snapshot holds that slice without it (`lua/guard.lua`).
        for shard in client.placement().shards_of(sku, c.width) {
            client.vouch_if_none(shard).await?;
        }
    }
    let r = crate::rebuild::rebuild(pool, client, sku, &opts).await?;
    Ok(r.slices
        .into_iter()
        .map(|(shard, slice)| {
            let o = if first {
                PreheatOutcome::Preheated { slice }
            } else {
                PreheatOutcome::Rebuilt { slice }
            };
            (shard, o)
        })
        .collect())
}

/// A campaign's state across the ledger and Redis.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub campaign: Campaign,
    /// Units the ledger counts as not held by an active claim.
    pub available: i64,
    pub pending: i64,
    pub confirmed: i64,
    pub releasing: i64,
    pub released: i64,
    /// Each shard's slice; `None` where it is not preheated.
    pub slices: Vec<(u16, Option<i64>)>,
}

pub async fn status(
    pool: &MySqlPool,
    client: &StockClient,
    sku: u64,
    t: Duration,
) -> Result<Status, OpsError> {
    let campaign = get(pool, sku, t).await?;
    let available = ledger::campaigns::available(pool, sku, t).await?;
    let rows = ledger::campaigns::units_by_status(pool, sku, t).await?;
    let units = |s: &str| {
        rows.iter()
            .find(|(k, _)| k == s)
            .map(|(_, n)| *n)
            .unwrap_or(0)
    };
    let slices = client.slices(sku, campaign.width).await?;
    Ok(Status {
        available: available.unwrap_or(0),
        pending: units("pending"),
        confirmed: units("confirmed"),
        releasing: units("releasing"),
        released: units("released"),
        slices,
        campaign,
    })
}

//! Draw campaigns (mode `draw`, docs/DESIGN.md "The draw"): a verifiable raffle in place of
//! first come, first served. Users enter during the entry window (`lua/draw_enter.lua`,
//! the gateway's `POST /v1/claims`); at the draw time this service closes the entries,
//! draws from the ledger, tells each entrant where they stand, and turns the winners, then
//! the waitlist as units come back, into ordinary claims.
//!
//! - [`entries`]: each shard's entries stream into the ledger, with its place.
//! - [`run`]: close, draw, mark, grant (marks in `mark.rs`, grants in `grant.rs`).
//! - [`restore`]: a shard whose draw Redis lost gets it back from the ledger.
//! - [`verify`]: anyone with the revealed seed recomputes the draw from the ledger.
//! - [`over`]: at close-out, the winners' answers kept on the shards.

use std::time::Duration;

use ledger::campaigns::Campaign;
use ledger::draws::{self, Draw};
use rand::RngCore;
use shard_router::draw::DrawSpec;
use shard_router::StockClient;
use sqlx::MySqlPool;

use crate::OpsError;

pub mod entries;
mod grant;
mod mark;
pub mod over;
pub mod restore;
pub mod run;
pub mod verify;

/// Makes `c` a draw closing at `draw_at_ms` with `waitlist` places. A draw created
/// before keeps its seed (a rerun of the same command changes nothing); a new one gets 32
/// random bytes from the OS's generator.
pub async fn create(
    pool: &MySqlPool,
    c: &Campaign,
    draw_at_ms: i64,
    waitlist: u32,
    t: Duration,
) -> Result<Draw, OpsError> {
    check_time(c, draw_at_ms)?;
    let seed = match draws::get(pool, c.sku, t).await? {
        Some(d) => d.seed,
        None => {
            let mut seed = vec![0u8; shard_router::draw::SEED_LEN];
            rand::rng().fill_bytes(&mut seed);
            seed
        }
    };
    Ok(draws::create(pool, c.sku, draw_at_ms, waitlist, &seed, t).await?)
}

/// Refuses a draw time outside the campaign's window.
pub fn check_time(c: &Campaign, draw_at_ms: i64) -> Result<(), OpsError> {
    if draw_at_ms <= c.start_ms || draw_at_ms >= c.end_ms {
        return Err(OpsError::Invalid(
            "the draw time (--draw-at, draw_at_ms) must be after the start and before the end \
             (entries run from the start to the draw, winners claim until the end)"
                .into(),
        ));
    }
    Ok(())
}

/// The draw as a shard keeps it.
pub fn spec(c: &Campaign, d: &Draw) -> DrawSpec {
    DrawSpec {
        sku: c.sku,
        entries_open_ms: c.start_ms,
        draw_at_ms: d.draw_at_ms,
        stock: c.stock,
        waitlist: d.waitlist,
        seed: d.seed.clone(),
    }
}

/// Opens `c`'s draw on every shard of the SKU where it is missing (a preheat, a rebuild):
/// before the SKU metadata is written, so a gateway that sees the campaign finds its draw.
/// A shard that has one keeps its state; entries the ledger holds come back through
/// [`restore`].
pub async fn open(
    pool: &MySqlPool,
    client: &StockClient,
    c: &Campaign,
    t: Duration,
) -> Result<(), OpsError> {
    let Some(d) = draws::get(pool, c.sku, t).await? else {
        return Ok(());
    };
    for shard in client.placement().shards_of(c.sku, c.width) {
        if client.draw_state(shard, c.sku).await?.is_none() {
            restore::shard(pool, client, c, &d, shard, t).await?;
        }
    }
    Ok(())
}

/// Refuses a change of mode once the campaign is preheated: gateways and shards already
/// sell it one way (a draw's entries, or first-come claims).
pub async fn check_mode(
    pool: &MySqlPool,
    client: &StockClient,
    c: &Campaign,
    want: draws::Mode,
    t: Duration,
) -> Result<(), OpsError> {
    let Some(mode) = draws::mode(pool, c.sku, t).await? else {
        return Ok(());
    };
    if mode == want {
        return Ok(());
    }
    let old = ledger::campaigns::get(pool, c.sku, t).await?;
    let live = client
        .slices(c.sku, old.width)
        .await?
        .iter()
        .any(|(_, s)| s.is_some());
    // A draw's seed and entries, or a queue's places, belong to that mode for good.
    if live || mode != draws::Mode::Fcfs {
        return Err(OpsError::Invalid(format!(
            "sku {} is a {} campaign{}; its mode cannot change",
            c.sku,
            mode.as_str(),
            if live { " already preheated" } else { "" }
        )));
    }
    Ok(())
}

/// What `consumer draw show` prints: the seed only once drawn.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Shown {
    pub sku: u64,
    pub state: draws::DrawState,
    pub draw_at_ms: i64,
    pub waitlist: u32,
    pub seed_sha256: String,
    pub seed: Option<String>,
    pub entrants: u64,
    pub granted_rank: u32,
}

pub async fn show(pool: &MySqlPool, sku: u64, t: Duration) -> Result<Shown, OpsError> {
    let d = draws::get(pool, sku, t)
        .await?
        .ok_or_else(|| OpsError::NotFound(format!("sku {sku} is not a draw campaign")))?;
    Ok(Shown {
        sku,
        state: d.state,
        draw_at_ms: d.draw_at_ms,
        waitlist: d.waitlist,
        seed: (d.state == draws::DrawState::Drawn).then(|| hex::encode(&d.seed)),
        seed_sha256: d.seed_sha256,
        entrants: draws::entry_count(pool, sku, t).await?,
        granted_rank: d.granted_rank,
    })
}

//! A draw's row: its terms, set once entries may come and fixed after, and the lists the
//! draw service and the restore loop work from.

use std::time::Duration;

use sha2::{Digest, Sha256};
use sqlx::{MySql, MySqlPool, Row, Transaction};

use super::{draw_of, entry_count, Draw, DrawState, Live, Mode, DRAW_COLUMNS};
use crate::error::LedgerError;
use crate::pool::bounded;

fn terms_fixed(sku: u64) -> LedgerError {
    LedgerError::Invalid(format!(
        "draw of sku {sku} has entries; its time, waitlist and seed cannot change"
    ))
}

/// What [`create`] would refuse for new terms, read before anything is written (an
/// operator's command stores the campaign first): a drawn draw, or one with entries, keeps
/// its time and waitlist.
pub async fn check_terms(
    pool: &MySqlPool,
    sku: u64,
    draw_at_ms: i64,
    waitlist: u32,
    t: Duration,
) -> Result<(), LedgerError> {
    let Some(d) = get(pool, sku, t).await? else {
        return Ok(());
    };
    if d.draw_at_ms == draw_at_ms && d.waitlist == waitlist {
        return Ok(());
    }
    if d.state == DrawState::Drawn || entry_count(pool, sku, t).await? > 0 {
        return Err(terms_fixed(sku));
    }
    Ok(())
}

/// Makes `sku`'s campaign a draw. Idempotent for the same values; while the draw is open and
/// has no entry its terms may still change (nobody entered under the published hash yet);
/// after that a change is refused. Refused too without a campaign row, or a seed outside
/// 16..=32 bytes (16 is HMAC-SHA1's floor of guessing resistance, 32 the column).
pub async fn create(
    pool: &MySqlPool,
    sku: u64,
    draw_at_ms: i64,
    waitlist: u32,
    seed: &[u8],
    t: Duration,
) -> Result<Draw, LedgerError> {
    if !(16..=32).contains(&seed.len()) {
        return Err(LedgerError::Invalid(format!(
            "draw seed of sku {sku} is {} bytes, must be 16..=32",
            seed.len()
        )));
    }
    let mut tx = bounded("begin", t, pool.begin()).await?;
    // The campaign row first, then the draw row, as commit_entries never holds the first.
    lock_campaign(&mut tx, sku, t).await?;
    let same = |d: &Draw| d.draw_at_ms == draw_at_ms && d.waitlist == waitlist && d.seed == seed;
    if let Some(old) = lock_draw(&mut tx, sku, t).await?.filter(|d| !same(d)) {
        refuse_if_fixed(&mut tx, &old, t).await?;
    }
    store(&mut tx, sku, draw_at_ms, waitlist, seed, t).await?;
    bounded("commit", t, tx.commit()).await?;
    get(pool, sku, t)
        .await?
        .ok_or_else(|| LedgerError::NotFound(format!("draw of sku {sku}")))
}

/// Locks the campaign row of `sku`; `Invalid` without one.
async fn lock_campaign(
    tx: &mut Transaction<'_, MySql>,
    sku: u64,
    t: Duration,
) -> Result<(), LedgerError> {
    let found: Option<u64> = bounded(
        "read campaign",
        t,
        sqlx::query_scalar("SELECT sku FROM campaigns WHERE sku = ? FOR UPDATE")
            .bind(sku)
            .fetch_optional(&mut **tx),
    )
    .await?;
    if found.is_none() {
        return Err(LedgerError::Invalid(format!("no campaign for sku {sku}")));
    }
    Ok(())
}

/// The draw row of `sku`, locked.
async fn lock_draw(
    tx: &mut Transaction<'_, MySql>,
    sku: u64,
    t: Duration,
) -> Result<Option<Draw>, LedgerError> {
    Ok(bounded(
        "read draw",
        t,
        sqlx::query(&format!(
            "SELECT {DRAW_COLUMNS} FROM draws d WHERE d.sku = ? FOR UPDATE"
        ))
        .bind(sku)
        .fetch_optional(&mut **tx),
    )
    .await?
    .map(|r| draw_of(&r)))
}

/// Refuses new terms for `old` once it is drawn or has an entry.
async fn refuse_if_fixed(
    tx: &mut Transaction<'_, MySql>,
    old: &Draw,
    t: Duration,
) -> Result<(), LedgerError> {
    let entered: Option<u64> = bounded(
        "any draw entry",
        t,
        sqlx::query_scalar("SELECT sku FROM draw_entries WHERE sku = ? LIMIT 1")
            .bind(old.sku)
            .fetch_optional(&mut **tx),
    )
    .await?;
    if old.state == DrawState::Drawn || entered.is_some() {
        return Err(terms_fixed(old.sku));
    }
    Ok(())
}

/// Writes the terms and marks the campaign a draw.
async fn store(
    tx: &mut Transaction<'_, MySql>,
    sku: u64,
    draw_at_ms: i64,
    waitlist: u32,
    seed: &[u8],
    t: Duration,
) -> Result<(), LedgerError> {
    let sha = hex::encode(Sha256::digest(seed));
    bounded(
        "upsert draw",
        t,
        sqlx::query(
            "INSERT INTO draws (sku, draw_at_ms, waitlist, seed, seed_sha256) VALUES (?, ?, ?, ?, ?) \
             ON DUPLICATE KEY UPDATE draw_at_ms = VALUES(draw_at_ms), waitlist = VALUES(waitlist), \
             seed = VALUES(seed), seed_sha256 = VALUES(seed_sha256)",
        )
        .bind(sku)
        .bind(draw_at_ms)
        .bind(waitlist)
        .bind(seed)
        .bind(&sha)
        .execute(&mut **tx),
    )
    .await?;
    bounded(
        "campaign mode",
        t,
        sqlx::query("UPDATE campaigns SET mode = 'draw' WHERE sku = ?")
            .bind(sku)
            .execute(&mut **tx),
    )
    .await?;
    Ok(())
}

/// The draw of `sku` (`None`: not a draw campaign).
pub async fn get(pool: &MySqlPool, sku: u64, t: Duration) -> Result<Option<Draw>, LedgerError> {
    let row = bounded(
        "read draw",
        t,
        sqlx::query(&format!(
            "SELECT {DRAW_COLUMNS} FROM draws d WHERE d.sku = ?"
        ))
        .bind(sku)
        .fetch_optional(pool),
    )
    .await?;
    Ok(row.map(|r| draw_of(&r)))
}

/// How `sku` sells (`None`: no campaign). A mode this build does not know is an error.
pub async fn mode(pool: &MySqlPool, sku: u64, t: Duration) -> Result<Option<Mode>, LedgerError> {
    let m: Option<String> = bounded(
        "campaign mode",
        t,
        sqlx::query_scalar("SELECT mode FROM campaigns WHERE sku = ?")
            .bind(sku)
            .fetch_optional(pool),
    )
    .await?;
    m.map(|m| m.parse()).transpose()
}

/// The draw service's work list, for campaigns whose close-out has not started: open draws
/// whose time has come, and drawn ones with ranks left to grant (`granted_rank` below
/// `stock + waitlist` and below the ranks recorded: fewer entrants than that leave nothing
/// past the last rank).
pub async fn due(pool: &MySqlPool, now_ms: i64, t: Duration) -> Result<Vec<Draw>, LedgerError> {
    let rows = bounded(
        "due draws",
        t,
        sqlx::query(&format!(
            "SELECT {DRAW_COLUMNS} FROM draws d JOIN campaigns c ON c.sku = d.sku \
             WHERE c.closing_ms IS NULL AND ((d.state = 'open' AND d.draw_at_ms <= ?) \
               OR (d.state = 'drawn' AND d.granted_rank < c.stock + d.waitlist \
                   AND d.granted_rank < (SELECT COUNT(*) FROM draw_ranks r WHERE r.sku = d.sku))) \
             ORDER BY d.sku"
        ))
        .bind(now_ms)
        .fetch_all(pool),
    )
    .await?;
    Ok(rows.iter().map(draw_of).collect())
}

/// Every draw (any state) of campaigns whose close-out has not started, with the campaign's
/// width and stock: the restore loop's list.
pub async fn live(pool: &MySqlPool, t: Duration) -> Result<Vec<Live>, LedgerError> {
    let rows = bounded(
        "live draws",
        t,
        sqlx::query(&format!(
            "SELECT {DRAW_COLUMNS}, c.width, c.stock FROM draws d JOIN campaigns c ON c.sku = d.sku \
             WHERE c.closing_ms IS NULL ORDER BY d.sku"
        ))
        .fetch_all(pool),
    )
    .await?;
    Ok(rows
        .iter()
        .map(|r| Live {
            draw: draw_of(r),
            width: r.get(9),
            stock: r.get(10),
        })
        .collect())
}

//! A poison entry applied once its cause is fixed (`consumer poison replay`): its claim row
//! goes through a batch's own path, under the campaign row's shared lock for its rebuild
//! generation (`claims::store`: ignored by claim id, the stock taken once, a late claim
//! listed as late), and the poison row is deleted in the same transaction, after the claim
//! (the lock order of a batch: campaigns, stock, then poison). The stream's place does not
//! move: it passed the entry when the entry was kept.

use std::time::Duration;

use sqlx::MySqlPool;

use crate::claims::{self, ClaimRow, Stored};
use crate::error::LedgerError;
use crate::late;
use crate::poison;
use crate::pool::bounded;

/// Stores `row` and removes the poison entry `stream`/`entry_id`, together. `None` (and
/// nothing changed) when no such entry is kept.
pub async fn replay(
    pool: &MySqlPool,
    row: &ClaimRow<'_>,
    stream: &str,
    entry_id: &str,
    t: Duration,
) -> Result<Option<Stored>, LedgerError> {
    let mut tx = bounded("begin", t, pool.begin()).await?;
    let gens = late::campaign_gens(&mut tx, &[row.sku], t).await?;
    let stored = claims::store(&mut tx, std::slice::from_ref(row), Some(&gens), t).await?;
    if !poison::remove(&mut tx, stream, entry_id, t).await? {
        bounded("rollback", t, tx.rollback()).await?;
        return Ok(None);
    }
    bounded("commit", t, tx.commit()).await?;
    Ok(Some(stored))
}

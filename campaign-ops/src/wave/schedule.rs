//! Storing waves: `consumer wave` and the admin API schedule one; the `--wave` flags of
//! `consumer campaign` declare the campaign's waves, and a rerun cancels what they no longer
//! list (while it adds nothing yet). The statements are the ledger's (`ledger::waves`).

use std::time::Duration;

use sqlx::MySqlPool;

use super::Wave;
use crate::OpsError;

pub use ledger::waves::Dropped;

/// Stores a wave (idempotent for the same id, units and due time; refused otherwise).
pub async fn schedule(pool: &MySqlPool, w: &Wave, t: Duration) -> Result<(), OpsError> {
    Ok(ledger::waves::store(pool, w, "command", t).await?)
}

/// [`schedule`] for a `--wave` flag of `consumer campaign`: such a wave is part of the
/// campaign's declaration, so a rerun without the flag cancels it ([`cancel_dropped`]).
pub async fn schedule_for_campaign(
    pool: &MySqlPool,
    w: &Wave,
    t: Duration,
) -> Result<(), OpsError> {
    Ok(ledger::waves::store(pool, w, "campaign", t).await?)
}

/// Cancels the waves `consumer campaign` scheduled for `sku` that are not in `listed`.
/// Under the campaign row's lock, the lock [`super::apply`] places a wave under: a wave either got
/// its place first (it is applied in full and kept) or is removed before it has one.
pub async fn cancel_dropped(
    pool: &MySqlPool,
    sku: u64,
    listed: &[String],
    t: Duration,
) -> Result<Dropped, OpsError> {
    Ok(ledger::waves::cancel_dropped(pool, sku, listed, t).await?)
}

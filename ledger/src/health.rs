//! The ledger's liveness probe (`/healthz` of the campaign operations: `campaign-ops/src/health.rs`).

use std::time::Duration;

use sqlx::MySqlPool;

use crate::pool::bounded;

/// True when MySQL answers `SELECT 1` through the pool within `t`.
pub async fn ping(pool: &MySqlPool, t: Duration) -> bool {
    matches!(
        bounded(
            "ping",
            t,
            sqlx::query_scalar::<_, i32>("SELECT 1").fetch_one(pool)
        )
        .await,
        Ok(1)
    )
}

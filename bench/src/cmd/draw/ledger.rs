//! What `bench draw` reads from the ledger: the draw's row and the SKU's claims per user.
//! Every query is bounded.

use std::str::FromStr;
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};

const QUERY_LIMIT: Duration = Duration::from_secs(20);

/// The `draws` row of a SKU.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct DrawRow {
    pub(crate) draw_at_ms: i64,
    pub(crate) state: String,
    pub(crate) drawn_at_ms: Option<i64>,
    pub(crate) entrants: Option<u64>,
    pub(crate) granted_rank: u32,
}

/// A user's claims of a SKU that are not released.
#[derive(Debug, Clone)]
pub(crate) struct UserUnits {
    pub(crate) user_id: String,
    pub(crate) units: u64,
    /// Units claimed under the request id `draw` (the draw's grants).
    pub(crate) granted: u64,
    pub(crate) last_claimed_ms: i64,
}

pub(crate) struct Ledger {
    pool: MySqlPool,
}

impl Ledger {
    pub(crate) fn connect(url: &str) -> anyhow::Result<Self> {
        let options = MySqlConnectOptions::from_str(url)?;
        let pool = MySqlPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(QUERY_LIMIT)
            .connect_lazy_with(options);
        Ok(Self { pool })
    }

    pub(crate) async fn draw(&self, sku: u64) -> anyhow::Result<Option<DrawRow>> {
        let q = sqlx::query_as::<_, DrawRow>(
            "SELECT draw_at_ms, CAST(state AS CHAR) AS state, drawn_at_ms, entrants, \
             granted_rank FROM draws WHERE sku = ?",
        )
        .bind(sku)
        .fetch_optional(&self.pool);
        Ok(tokio::time::timeout(QUERY_LIMIT, q).await??)
    }

    /// Every user holding a unit of `sku`, with how many and how many were granted.
    pub(crate) async fn units(&self, sku: u64) -> anyhow::Result<Vec<UserUnits>> {
        let q = sqlx::query_as::<_, (String, i64, i64, i64)>(
            "SELECT CAST(user_id AS CHAR), CAST(SUM(qty) AS SIGNED), \
             CAST(SUM(CASE WHEN request_id = 'draw' THEN qty ELSE 0 END) AS SIGNED), \
             MAX(claimed_ms) FROM claims WHERE sku = ? AND status <> 'released' \
             GROUP BY user_id",
        )
        .bind(sku)
        .fetch_all(&self.pool);
        let rows = tokio::time::timeout(QUERY_LIMIT, q).await??;
        Ok(rows
            .into_iter()
            .map(|(user_id, units, granted, last)| UserUnits {
                user_id,
                units: units.max(0) as u64,
                granted: granted.max(0) as u64,
                last_claimed_ms: last,
            })
            .collect())
    }
}

/// The user number in a bench user name `<tag>u<n>`, when it is one of this run's.
pub(crate) fn user_index(tag: &str, user_id: &str) -> Option<u32> {
    user_id.strip_prefix(tag)?.strip_prefix('u')?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_numbers() {
        assert_eq!(user_index("d1-", "d1-u42"), Some(42));
        assert_eq!(user_index("d1-", "d2-u42"), None);
        assert_eq!(user_index("d1-", "d1-ux"), None);
    }
}

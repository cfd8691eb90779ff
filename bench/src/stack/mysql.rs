//! The ledger queries the bench needs, through sqlx (the driver the consumer uses): rows
//! per SKU after a run, the latest reconciliation drift, and the private database a local
//! stack creates and drops. Every query is bounded.

use std::str::FromStr;
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};

/// A failed ledger query.
#[derive(Debug, thiserror::Error)]
pub enum MysqlError {
    #[error("mysql url {0:?}: expected mysql://user[:pass]@host[:port][/db]")]
    BadScheme(String),
    #[error("mysql url {url:?}: {source}")]
    BadUrl {
        url: String,
        #[source]
        source: sqlx::Error,
    },
    #[error("ledger query: {0}")]
    Query(#[from] sqlx::Error),
    #[error("ledger query: no answer within {0:?}")]
    Timeout(Duration),
}

/// Bound on one query, connecting included.
const QUERY_LIMIT: Duration = Duration::from_secs(20);

/// A ledger (or a bare server, for creating databases), connected on first use.
#[derive(Debug, Clone)]
pub struct Mysql {
    pool: MySqlPool,
}

impl Mysql {
    /// From a `mysql://user[:pass]@host[:port][/db]` URL. Connects lazily: a bad password
    /// or a stopped server shows at the first query.
    pub fn parse(url: &str) -> Result<Self, MysqlError> {
        // sqlx reads any scheme as MySQL; a postgres:// URL here is a mistake to name.
        if !(url.starts_with("mysql://") || url.starts_with("mariadb://")) {
            return Err(MysqlError::BadScheme(url.to_owned()));
        }
        let options = MySqlConnectOptions::from_str(url).map_err(|source| MysqlError::BadUrl {
            url: url.to_owned(),
            source,
        })?;
        let pool = MySqlPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(QUERY_LIMIT)
            .connect_lazy_with(options);
        Ok(Self { pool })
    }

    /// `mysql://user[:pass]@host:port/db` for a process the bench starts (the consumer).
    pub fn url_of(server_url: &str, db: &str) -> String {
        let base = server_url.split('?').next().unwrap_or(server_url);
        let rest = base.strip_prefix("mysql://").unwrap_or(base);
        let server = rest.split('/').next().unwrap_or(rest);
        format!("mysql://{server}/{db}")
    }

    /// Ledger rows per SKU whose user id starts with `tag` (the run's users).
    pub async fn rows_per_sku(&self, tag: &str) -> Result<Vec<(u64, u64)>, MysqlError> {
        let q = sqlx::query_as::<_, (u64, i64)>(
            "SELECT sku, COUNT(*) FROM claims WHERE user_id LIKE CONCAT(?, '%') GROUP BY sku",
        )
        .bind(tag)
        .fetch_all(&self.pool);
        let rows = bounded(q).await?;
        Ok(rows
            .into_iter()
            .map(|(sku, n)| (sku, n.max(0) as u64))
            .collect())
    }

    /// The drift of the latest reconciliation of `sku`, if one ran.
    pub async fn latest_drift(&self, sku: u64) -> Result<Option<i64>, MysqlError> {
        let q = sqlx::query_scalar::<_, i64>(
            "SELECT drift FROM reconcile_runs WHERE sku = ? ORDER BY id DESC LIMIT 1",
        )
        .bind(sku)
        .fetch_optional(&self.pool);
        bounded(q).await
    }

    /// Creates database `name` (made of `[a-z0-9_]` by the caller).
    pub async fn create_database(&self, name: &str) -> Result<(), MysqlError> {
        let sql = format!("CREATE DATABASE `{name}`");
        bounded(sqlx::raw_sql(&sql).execute(&self.pool)).await?;
        Ok(())
    }

    /// Drops database `name` if it exists.
    pub async fn drop_database(&self, name: &str) -> Result<(), MysqlError> {
        let sql = format!("DROP DATABASE IF EXISTS `{name}`");
        bounded(sqlx::raw_sql(&sql).execute(&self.pool)).await?;
        Ok(())
    }
}

async fn bounded<T>(
    f: impl std::future::Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, MysqlError> {
    tokio::time::timeout(QUERY_LIMIT, f)
        .await
        .map_err(|_| MysqlError::Timeout(QUERY_LIMIT))?
        .map_err(MysqlError::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_for_a_database() {
        assert_eq!(
            Mysql::url_of("mysql://root:pw@127.0.0.1:3307", "fg_bench_1"),
            "mysql://root:pw@127.0.0.1:3307/fg_bench_1"
        );
        assert_eq!(
            Mysql::url_of("mysql://root@127.0.0.1:3306/other?x=1", "b"),
            "mysql://root@127.0.0.1:3306/b"
        );
    }

    #[tokio::test]
    async fn bad_urls_are_refused_before_any_query() {
        assert!(Mysql::parse("postgres://x/y").is_err());
    }
}

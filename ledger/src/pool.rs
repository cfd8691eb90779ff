//! The MySQL pool, and the migrations in `ledger/migrations`, applied at start.

use std::future::Future;
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};

use crate::error::{db, LedgerError};

/// Embedded at build time, so a binary always carries the schema it expects.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Opens a pool. `acquire_timeout` bounds every wait for a connection, so a dead server
/// turns into a prompt, retryable error instead of a hang.
pub async fn connect(url: &str, timeout: Duration) -> Result<MySqlPool, LedgerError> {
    let opts: MySqlConnectOptions = url
        .parse()
        .map_err(|e| LedgerError::Invalid(format!("mysql url: {e}")))?;
    // Room for every fixed statement and the ledger INSERT's padded shapes
    // (`row_buckets.rs`) at once, so the hot INSERT is never evicted (sqlx's default: 100).
    // A capacity the URL names is the operator's (0: nothing stays prepared on the server).
    let opts = if names_statement_cache(url) {
        opts
    } else {
        opts.statement_cache_capacity(STATEMENT_CACHE_CAPACITY)
    };
    Ok(MySqlPoolOptions::new()
        .max_connections(8)
        .min_connections(0)
        .acquire_timeout(timeout)
        // Drop connections that sat idle; a restarted server leaves them dead.
        .idle_timeout(Some(Duration::from_secs(60)))
        .test_before_acquire(true)
        .connect_lazy_with(opts))
}

/// Statements each connection keeps prepared unless the URL says otherwise.
const STATEMENT_CACHE_CAPACITY: usize = 256;

/// True when `url`'s query sets sqlx's `statement-cache-capacity`.
fn names_statement_cache(url: &str) -> bool {
    let query = url.split_once('?').map_or("", |(_, q)| q);
    let query = query.split_once('#').map_or(query, |(q, _)| q);
    query
        .split('&')
        .any(|pair| pair.split_once('=').map_or(pair, |(k, _)| k) == "statement-cache-capacity")
}

/// Applies pending migrations (idempotent; concurrent starters serialise on sqlx's lock).
pub async fn migrate(pool: &MySqlPool) -> Result<(), LedgerError> {
    MIGRATOR.run(pool).await?;
    Ok(())
}

/// Runs a MySQL future under `after`, naming `op` in any error.
pub async fn bounded<T>(
    op: &'static str,
    after: Duration,
    fut: impl Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, LedgerError> {
    match tokio::time::timeout(after, fut).await {
        Ok(r) => r.map_err(db(op)),
        Err(_) => Err(LedgerError::Timeout { op, after }),
    }
}

#[cfg(test)]
mod tests {
    use super::names_statement_cache;

    #[test]
    fn a_capacity_in_the_url_is_seen() {
        assert!(!names_statement_cache(
            "mysql://root@127.0.0.1:3306/flashgate"
        ));
        assert!(!names_statement_cache(
            "mysql://root@127.0.0.1/flashgate?ssl-mode=required"
        ));
        assert!(names_statement_cache(
            "mysql://root@127.0.0.1/flashgate?statement-cache-capacity=0"
        ));
        assert!(names_statement_cache(
            "mysql://root@h/db?ssl-mode=disabled&statement-cache-capacity=512#x"
        ));
        assert!(!names_statement_cache(
            "mysql://root@h/db?x-statement-cache-capacity=5"
        ));
    }
}

//! The consumer's error type: says which side failed (MySQL, Redis, input) and whether the
//! same call may succeed later.

use shard_router::StockError;

/// Errors of the ledger, the stream loop and campaign administration.
#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    /// MySQL refused or was unreachable.
    #[error("mysql {op}: {source}")]
    Db {
        op: &'static str,
        #[source]
        source: sqlx::Error,
    },
    /// No answer from MySQL within the bound; the statement may or may not have run.
    #[error("mysql {op}: no answer within {after:?}")]
    DbTimeout {
        op: &'static str,
        after: std::time::Duration,
    },
    #[error(transparent)]
    Redis(#[from] StockError),
    /// Migrations could not be applied.
    #[error("migrations: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A caller mistake (unknown campaign, bad field); nothing was changed.
    #[error("invalid: {0}")]
    Invalid(String),
    /// The thing asked for does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// Written to Redis, but no replica confirmed it within the bound (`replica.rs`): not
    /// done yet as far as anything else may rely on; running it again finishes it.
    #[error("not confirmed by a replica: {0}")]
    Unconfirmed(String),
}

impl ConsumerError {
    /// True when retrying the same work later may succeed (outages, timeouts, deadlocks).
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Db { source, .. } => db_retryable(source),
            Self::DbTimeout { .. } | Self::Unconfirmed(_) => true,
            Self::Redis(e) => e.is_retryable(),
            Self::Migrate(_) | Self::Invalid(_) | Self::NotFound(_) => false,
        }
    }

    /// True for a caller mistake (answered 4xx by the admin API, never logged as an error).
    pub fn is_client_error(&self) -> bool {
        matches!(self, Self::Invalid(_) | Self::NotFound(_))
    }
}

/// Connection trouble and lock conflicts are retryable; constraint and syntax errors are not.
fn db_retryable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(db) => {
            // 1205 lock wait timeout, 1213 deadlock, 2006/2013 server gone / lost connection,
            // 1040 too many connections, 1927 connection killed, 1053 server shutdown.
            matches!(
                db.code().as_deref(),
                Some("40001") | Some("08S01") | Some("08004")
            ) || db
                .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                .map(|m| matches!(m.number(), 1205 | 1213 | 2006 | 2013 | 1040 | 1927 | 1053))
                .unwrap_or(false)
        }
        _ => false,
    }
}

/// Attaches the operation name to a sqlx error.
pub(crate) fn db(op: &'static str) -> impl FnOnce(sqlx::Error) -> ConsumerError {
    move |source| ConsumerError::Db { op, source }
}

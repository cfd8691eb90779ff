//! The ledger's error type: which statement failed, and whether the same call may succeed
//! later.

use std::time::Duration;

/// A statement on the ledger failed, or what it was asked for is not there.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// MySQL refused or was unreachable.
    #[error("mysql {op}: {source}")]
    Db {
        op: &'static str,
        #[source]
        source: sqlx::Error,
    },
    /// No answer from MySQL within the bound; the statement may or may not have run.
    #[error("mysql {op}: no answer within {after:?}")]
    Timeout { op: &'static str, after: Duration },
    /// Migrations could not be applied.
    #[error("migrations: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A caller mistake (bad URL, bad field); nothing was changed.
    #[error("invalid: {0}")]
    Invalid(String),
    /// The row asked for does not exist.
    #[error("not found: {0}")]
    NotFound(String),
}

impl LedgerError {
    /// True when retrying the same work later may succeed (outages, timeouts, deadlocks).
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Db { source, .. } => db_retryable(source),
            Self::Timeout { .. } => true,
            Self::Migrate(_) | Self::Invalid(_) | Self::NotFound(_) => false,
        }
    }
}

/// Connection trouble and lock conflicts are retryable; constraint and syntax errors are not.
pub fn db_retryable(e: &sqlx::Error) -> bool {
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
pub fn db(op: &'static str) -> impl FnOnce(sqlx::Error) -> LedgerError {
    move |source| LedgerError::Db { op, source }
}

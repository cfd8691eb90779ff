//! The ledger's error type: which statement failed, and whether the same call may succeed
//! later.

use std::time::Duration;

use crate::cause::{self, Cause};

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
    /// Why it failed: the server's state, the rows, or a bug (`cause.rs`).
    pub fn cause(&self) -> Cause {
        match self {
            Self::Db { source, .. } => cause::of_sqlx(source),
            Self::Timeout { .. } => Cause::ServerState,
            // What the caller asked for is at fault; nothing was changed.
            Self::Invalid(_) | Self::NotFound(_) => Cause::RowFault,
            Self::Migrate(_) => Cause::Bug,
        }
    }

    /// True when retrying the same work later may succeed: the server's state, not the
    /// statement or its rows.
    pub fn is_retryable(&self) -> bool {
        self.cause() == Cause::ServerState
    }

    /// A short name of the cause, the same for every retry of one fault (`mysql 1290`,
    /// `timeout`): a stalled writer logs each distinct one once.
    pub fn code(&self) -> String {
        match self {
            Self::Db { source, .. } => match source {
                sqlx::Error::Database(db) => {
                    match db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
                        Some(m) => format!("mysql {}", m.number()),
                        None => format!("sqlstate {}", db.code().unwrap_or_default()),
                    }
                }
                sqlx::Error::Io(e) => format!("io {:?}", e.kind()),
                other => {
                    let text = format!("{other:?}");
                    text.split(['(', ' ', '{']).next().unwrap_or("").to_owned()
                }
            },
            Self::Timeout { op, .. } => format!("timeout of {op}"),
            Self::Migrate(_) => "migrations".into(),
            Self::Invalid(_) => "invalid".into(),
            Self::NotFound(_) => "not found".into(),
        }
    }
}

/// True when retrying may succeed ([`Cause::ServerState`]); constraint, data and syntax
/// errors are not.
pub fn db_retryable(e: &sqlx::Error) -> bool {
    cause::of_sqlx(e) == Cause::ServerState
}

/// Attaches the operation name to a sqlx error.
pub fn db(op: &'static str) -> impl FnOnce(sqlx::Error) -> LedgerError {
    move |source| LedgerError::Db { op, source }
}

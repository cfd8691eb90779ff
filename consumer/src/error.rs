//! The consumer's error type: says which side failed (MySQL, Redis, input) and whether the
//! same call may succeed later.

use ledger::{Cause, LedgerError};
use shard_router::StockError;

/// Errors of the stream loop, the Redis side of recovery and campaign administration; a
/// ledger statement's error keeps its own type inside [`ConsumerError::Ledger`].
#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    /// A statement on the ledger failed (`ledger` crate).
    #[error(transparent)]
    Ledger(LedgerError),
    #[error(transparent)]
    Redis(#[from] StockError),
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

/// The ledger's caller mistakes stay caller mistakes (the admin API answers them 4xx).
impl From<LedgerError> for ConsumerError {
    fn from(e: LedgerError) -> Self {
        match e {
            LedgerError::Invalid(m) => Self::Invalid(m),
            LedgerError::NotFound(m) => Self::NotFound(m),
            e => Self::Ledger(e),
        }
    }
}

impl ConsumerError {
    /// Why it failed (`ledger::cause`): the writer retries the server's state and bugs
    /// alike (nothing given up), and keeps as poison only a row at fault on its own.
    pub fn cause(&self) -> Cause {
        match self {
            Self::Ledger(e) => e.cause(),
            Self::Unconfirmed(_) => Cause::ServerState,
            Self::Redis(e) if e.is_retryable() => Cause::ServerState,
            Self::Redis(_) => Cause::Bug,
            Self::Invalid(_) | Self::NotFound(_) => Cause::RowFault,
        }
    }

    /// True when retrying the same work later may succeed (outages, timeouts, deadlocks).
    pub fn is_retryable(&self) -> bool {
        self.cause() == Cause::ServerState
    }

    /// The same for every retry of one fault (`ledger::LedgerError::code`).
    pub fn code(&self) -> String {
        match self {
            Self::Ledger(e) => e.code(),
            Self::Redis(_) => "redis".into(),
            Self::Invalid(_) => "invalid".into(),
            Self::NotFound(_) => "not found".into(),
            Self::Unconfirmed(_) => "unconfirmed".into(),
        }
    }

    /// True for a caller mistake (answered 4xx by the admin API, never logged as an error).
    pub fn is_client_error(&self) -> bool {
        matches!(self, Self::Invalid(_) | Self::NotFound(_))
    }
}

//! The operations' error type: the side that failed (MySQL, Redis), a caller mistake the
//! admin API answers 4xx, or a write no replica confirmed yet. The data path's own errors
//! (`consumer::ConsumerError`) arrive here through `?` and keep their side.

use consumer::ConsumerError;
use ledger::{Cause, LedgerError};
use shard_router::StockError;

/// Errors of campaign administration, the background loops and the commands.
#[derive(Debug, thiserror::Error)]
pub enum OpsError {
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
    /// Written to Redis, but no replica confirmed it within the bound
    /// (`consumer/src/replica.rs`): not done yet as far as anything else may rely on;
    /// running it again finishes it.
    #[error("not confirmed by a replica: {0}")]
    Unconfirmed(String),
}

/// The ledger's caller mistakes stay caller mistakes (the admin API answers them 4xx).
impl From<LedgerError> for OpsError {
    fn from(e: LedgerError) -> Self {
        match e {
            LedgerError::Invalid(m) => Self::Invalid(m),
            LedgerError::NotFound(m) => Self::NotFound(m),
            e => Self::Ledger(e),
        }
    }
}

impl From<ConsumerError> for OpsError {
    fn from(e: ConsumerError) -> Self {
        match e {
            ConsumerError::Ledger(e) => e.into(),
            ConsumerError::Redis(e) => Self::Redis(e),
        }
    }
}

impl OpsError {
    /// Why it failed (`ledger::cause`).
    pub fn cause(&self) -> Cause {
        match self {
            Self::Ledger(e) => e.cause(),
            Self::Unconfirmed(_) => Cause::ServerState,
            Self::Redis(e) if e.is_retryable() => Cause::ServerState,
            Self::Redis(_) => Cause::Bug,
            Self::Invalid(_) | Self::NotFound(_) => Cause::RowFault,
        }
    }

    /// True when retrying the same work later may succeed (outages, timeouts, deadlocks,
    /// a replica not confirmed yet).
    pub fn is_retryable(&self) -> bool {
        self.cause() == Cause::ServerState
    }

    /// True for a caller mistake (answered 4xx by the admin API, never logged as an error).
    pub fn is_client_error(&self) -> bool {
        matches!(self, Self::Invalid(_) | Self::NotFound(_))
    }
}

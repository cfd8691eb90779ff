//! The data path's error type: says which side failed (MySQL or Redis), and through
//! [`ConsumerError::cause`] whether the same call may succeed later.

use ledger::{Cause, LedgerError};
use shard_router::StockError;

/// Errors of the stream readers, the writer and the late-claim sweep; each side's error
/// keeps its own type inside. Caller mistakes (a bad field, an unknown campaign) are the
/// operations' (`campaign_ops::OpsError`), not the data path's.
#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    /// A statement on the ledger failed (`ledger` crate).
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error(transparent)]
    Redis(#[from] StockError),
}

impl ConsumerError {
    /// Why it failed (`ledger::cause`): the writer retries the server's state and bugs
    /// alike (nothing given up), and keeps as poison only a row at fault on its own.
    pub fn cause(&self) -> Cause {
        match self {
            Self::Ledger(e) => e.cause(),
            Self::Redis(e) if e.is_retryable() => Cause::ServerState,
            Self::Redis(_) => Cause::Bug,
        }
    }

    /// The same for every retry of one fault (`ledger::LedgerError::code`).
    pub fn code(&self) -> String {
        match self {
            Self::Ledger(e) => e.code(),
            Self::Redis(_) => "redis".into(),
        }
    }
}

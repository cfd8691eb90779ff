//! The ledger crate's pool, and its bound on a statement with the consumer's error type,
//! for the statements not yet moved into `ledger`.

use std::future::Future;
use std::time::Duration;

pub use ledger::pool::{connect, migrate};

use crate::error::ConsumerError;

/// `ledger::pool::bounded`, its error as a [`ConsumerError`].
pub async fn bounded<T>(
    op: &'static str,
    after: Duration,
    fut: impl Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, ConsumerError> {
    Ok(ledger::pool::bounded(op, after, fut).await?)
}

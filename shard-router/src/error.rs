//! One error type for every Redis-facing call, which says which operation failed and
//! whether a retry can help.

use std::time::Duration;

/// Errors from [`crate::StockClient`] and the claim protocol.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StockError {
    /// Redis answered with an error, or the connection failed.
    #[error("redis {op}: {source}")]
    Redis {
        op: &'static str,
        #[source]
        source: redis::RedisError,
    },
    /// No answer within the bound. For a write the outcome is unknown: the script may have
    /// run. Callers answer 503 and let reconciliation settle the books.
    #[error("redis {op}: no answer within {after:?}")]
    Timeout { op: &'static str, after: Duration },
    /// A script answered something outside its documented codes: a version mismatch
    /// between the Lua files and this crate, never a client mistake.
    #[error("redis {op}: unexpected script reply: {detail}")]
    Protocol { op: &'static str, detail: String },
    /// The claim took so long that its hold was about to expire; it stopped before taking
    /// anything and gave the user's count back. Nothing was taken.
    #[error("redis {op}: the claim outlived its hold; nothing was taken")]
    Expired { op: &'static str },
    /// A rerouted claim took its units, but its hold was no longer there to keep: settled
    /// by someone else (the consumer's resolution of an expired hold, its late claim's
    /// apply, a rebuild after a loss) or, after a loss, replaced by another claim's hold of
    /// the same `user|seq`. The request's answer is not this attempt's to give: a retry
    /// with the same request id reads the one stored.
    #[error("redis {op}: the hold was settled elsewhere; the request's stored answer decides")]
    HoldSettled { op: &'static str },
    /// Replica durability: no replica confirmed a step that must be durable before the
    /// claim goes on (the hold of a second chance). The step was undone; nothing was taken.
    #[error("redis {op}: no replica confirmed it; undone, nothing was taken")]
    Unconfirmed { op: &'static str },
    /// A read that must see the shard live found its stock slice missing (Redis lost it,
    /// or a rebuild from the ledger holds the shard): a stored answer may be missing with
    /// it until the rebuild restores it. Nothing was taken.
    #[error(
        "redis {op}: a stock slice is missing (lost, or held by a rebuild); nothing was taken"
    )]
    SliceMissing { op: &'static str },
    /// The shard's Redis process is not one the ledger vouched for (it restarted, or a
    /// replica took over, and may hold state older than the ledger): a selling script
    /// refused before it read anything (`lua/guard.lua`). Nothing was taken; the consumer
    /// rebuilds the shard from the ledger and vouches for it within a few seconds.
    #[error("redis {op}: the shard is being checked against the ledger; nothing was taken")]
    Restoring { op: &'static str },
    /// The caller passed something the keyspace cannot hold.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl StockError {
    /// True when the same call may succeed later (connection trouble, timeouts, cluster
    /// moves). Client mistakes and protocol mismatches are never retryable.
    pub fn is_retryable(&self) -> bool {
        match self {
            StockError::Redis { source, .. } => {
                source.is_io_error()
                    || source.is_timeout()
                    || source.is_connection_dropped()
                    || source.is_connection_refusal()
                    || source.is_cluster_error()
            }
            StockError::Timeout { .. }
            | StockError::Expired { .. }
            | StockError::HoldSettled { .. }
            | StockError::Unconfirmed { .. }
            | StockError::SliceMissing { .. }
            | StockError::Restoring { .. } => true,
            StockError::Protocol { .. } | StockError::InvalidArgument(_) => false,
        }
    }

    /// True when Redis answered `NOGROUP`: the stream or its consumer group is gone (a
    /// restart without persistence, a FLUSHALL), and creating the group again cures it.
    pub fn is_no_group(&self) -> bool {
        matches!(self, StockError::Redis { source, .. } if has_code(source, "NOGROUP"))
    }

    /// True when a write may or may not have happened (timeout or dropped connection), or
    /// happened and its answer is another's to give ([`StockError::HoldSettled`]).
    pub fn is_ambiguous(&self) -> bool {
        match self {
            StockError::Timeout { .. } | StockError::HoldSettled { .. } => true,
            StockError::Redis { source, .. } => {
                source.is_timeout() || source.is_connection_dropped() || source.is_io_error()
            }
            _ => false,
        }
    }
}

/// True when Redis answered `code`, alone or as one command of a pipeline (a pipeline's
/// error carries its commands' server errors, and no code of its own).
pub(crate) fn has_code(e: &redis::RedisError, code: &str) -> bool {
    e.code() == Some(code)
        || e.clone()
            .into_server_errors()
            .is_some_and(|items| items.iter().any(|(_, s)| s.code() == code))
}

//! flashgate's stock core: where stock lives in Redis and how a claim takes it.
//!
//! Layout:
//! - [`placement`]: pure math. SKU → shards, user → home shard, second-chance order,
//!   per-shard hash tags spread over the cluster's slots.
//! - [`keys`]: the name of every Redis key and channel.
//! - `lua/` (repository root): the scripts; [`StockClient`] runs them by EVALSHA.
//! - [`outcome`]: typed requests and results; no raw script code leaves the crate.
//! - [`protocol`]: the whole claim (home shard, hold, second chance, settle).
//! - [`record`]: the claim record codec shared with the consumer.
//! - `replay`: the stored answer of a request id, read without a script.
//! - `replay_users`: who may have a stored answer on a sold-out SKU (the gateway's filter).
//! - `clock`: Redis's clock (`TIME`) and a process's skew from it.
//! - [`args`]: the `--redis`, `--redis-cluster` and `--shards` flags every binary takes.
//! - [`conn`]: one connection type for single Redis and Redis Cluster.
//! - `batch`: group commit of claim scripts per shard (one pipeline per batch, closed by
//!   the batch's `WAIT` with replica durability).
//! - [`replication`]: what `INFO replication` and a fence say; the fences themselves
//!   (replica checks that do not trust the connection) are `StockClient` calls.
//! - [`health`]: which shards' masters answer right now (readiness, failover view).
//! - [`rebuild`]: the Redis half of a rebuild from the ledger (fence, write, replay answers).
//! - [`status`]: the `status` names of the gateway's answers, shared with bench and tests.
//! - [`stream`]: a shard's claims stream as typed operations (group, read, ack+delete,
//!   take-over, depth) for the consumer, the rebuild and reconciliation.

pub mod args;
pub mod audit;
mod batch;
mod client;
mod clock;
pub mod codec;
pub mod conn;
pub mod decision;
pub mod draw;
mod error;
mod guard;
pub mod health;
pub mod keys;
pub mod outcome;
pub mod placement;
pub mod protocol;
pub mod queue;
pub mod rebuild;
pub mod record;
mod replay;
mod replay_users;
pub mod replication;
mod reply;
mod scripts;
pub mod status;
pub mod stream;
#[cfg(feature = "test-util")]
pub mod test_util;

pub use args::RedisArgs;
pub use client::{Joined, ServerIdentity, StockClient, StockConfig, GRANT_REQUEST};
pub use conn::{RedisConn, RedisTarget, Timeouts};
pub use error::StockError;
pub use guard::claim_body;
pub use health::ShardHealth;
pub use outcome::*;
pub use placement::{Placement, ShardId};
pub use record::ClaimRecord;
pub use replay::StoredAnswer;
pub use replay_users::{ReplayMarks, ReplayUsers};
pub use replication::{Fence, ReplicationInfo};
pub use status::ApiStatus;

/// Milliseconds since the Unix epoch: the gateway clock passed to every script.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

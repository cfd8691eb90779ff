//! flashgate consumer: the data path from the per-shard claims streams into the ledger.
//!
//! This crate owns what a claim passes through after Redis acknowledged it: reading each
//! shard's stream from the place the ledger keeps, committing each batch's rows and the
//! place after them in one transaction (`ledger` crate: exactly once by construction),
//! trimming what committed, and counting in Redis the late claims a rebuild did not. It is
//! small and reviewed on its own: the campaign operations around it (preheat, waves,
//! releases, reconciliation, rebuild, close-out, the admin API, the CLI and the `consumer`
//! binary) are the `campaign-ops` crate, which runs it through the API below and nothing
//! else.
//!
//! Layout (one concept per file):
//! - [`config`]: the data path's settings and their documented defaults.
//! - `stream` (shard-router's): the stream operations on one shard (XREAD after a place,
//!   trim); `lease`: a shard's lease and its renewal; `shard`: a shard's reader, from the
//!   ledger's place into the writer's bounded channel, the new-master rule.
//! - `gather`: a writer loop's reads gathered into batches (max rows / max wait);
//!   `writer`: each batch → [`commit`]: one ledger transaction per batch, of records
//!   turned into rows ([`rows`]) and the streams' places; [`late`]:
//!   claims committed after the rebuild that did not count them; `final_answers`:
//!   rerouted claims' replay answers made final after the commit; `stall`: a writer loop
//!   that cannot commit, for `/healthz` and its gauge.
//! - [`replica`]: wait for a replica before committing (default wherever there is one).
//! - `flush`: the consumer's heartbeat and its half of the rebuild's flush handshake;
//!   `inflight`: what this process read and has not settled.
//! - `startup`: waiting out a Redis that is still coming up; `streams`: the data path
//!   started and drained as one unit.
//! - [`metrics`]: the data path's metric names and help.

pub mod commit;
pub mod config;
mod error;
mod final_answers;
mod flush;
mod gather;
mod inflight;
pub mod late;
mod lease;
pub mod metrics;
pub mod replica;
pub mod rows;
mod shard;
mod stall;
mod startup;
mod streams;
mod writer;

// The consumer's modules name the shared plumbing by these paths.
use plumbing::{backoff, shutdown as signal};
use shard_router::stream;

// The API campaign-ops runs the data path by: the modules above marked `pub` (each
// item in them that is not `pub(crate)`), and these.
pub use config::Config;
pub use error::ConsumerError;
/// A heartbeat older than this is a consumer the rebuild's flush no longer waits for.
pub use flush::HEARTBEAT_STALE_AFTER;
pub use stall::Stalls;
pub use startup::connect_redis;
pub use streams::{connect_db, Streams};
// A reader and writer driven by hand: the exactly-once and flush drills of
// campaign-ops/tests/it (places.rs, rebuild_flush_review.rs) crash them between steps.
pub use inflight::InFlight;
pub use lease::ShardLease;
pub use shard::Read;
pub use writer::Writer;

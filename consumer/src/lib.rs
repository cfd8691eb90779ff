//! flashgate consumer: the data path from the per-shard claims streams into the ledger.
//!
//! This crate owns what a claim passes through after Redis acknowledged it: reading each
//! shard's stream from the place the ledger keeps, committing each batch's rows and the
//! place after them in one transaction (`ledger` crate: exactly once by construction),
//! trimming what committed, and counting in Redis the late claims a rebuild did not. It is one of the parts of the consumer process; the
//! campaign operations around it (preheat, waves, releases, reconciliation, rebuild,
//! close-out, the admin API and the CLI) are the `campaign-ops` crate, which runs it.
//!
//! Layout (one concept per file):
//! - [`config`]: settings of the consumer process and their documented defaults;
//!   [`clock`]: Redis's clock decides.
//! - [`stream`] (shard-router's): the stream operations on one shard (XREAD after a place,
//!   trim); [`shard`]: a shard's lease and its reader, from the ledger's place into the
//!   writer's bounded channel, the new-master rule.
//! - [`writer`]: batches (max rows / max wait) → [`commit`]: one ledger transaction per
//!   batch, of records turned into rows ([`rows`]) and the streams' places; [`late`]:
//!   claims committed after the rebuild that did not count them; [`final_answers`]:
//!   rerouted claims' replay answers made final after the commit; [`stall`]: a writer
//!   loop that cannot commit, for `/healthz` and its gauge.
//! - [`replica`]: wait for a replica before committing (default wherever there is one).
//! - [`flush`]: the consumer's heartbeat and its half of the rebuild's flush handshake;
//!   [`inflight`]: what this process read and has not settled.
//! - [`startup`]: waiting out a Redis that is still coming up; [`streams`]: the data path
//!   started and drained as one unit.
//! - [`memory`]: Redis memory against its limit; [`metrics`]: every metric's name and help.

pub mod clock;
pub mod commit;
pub mod config;
mod error;
pub mod final_answers;
pub mod flush;
pub mod inflight;
pub mod late;
pub mod memory;
pub mod metrics;
pub mod replica;
pub mod rows;
pub mod shard;
pub mod stall;
pub mod startup;
pub mod streams;
pub mod writer;

// The consumer's modules name the shared plumbing by these paths.
pub use plumbing::{backoff, shutdown as signal};
pub use shard_router::stream;

pub use config::Config;
pub use error::ConsumerError;

//! flashgate consumer: claims streams → the MySQL ledger, plus everything that keeps the
//! ledger and Redis in agreement.
//!
//! Layout (one concept per file):
//! - [`config`]: settings and their documented defaults; [`clock`]: Redis's clock decides.
//! - `db`: the ledger crate's pool and migrations (`ledger/migrations`, applied at start).
//! - [`stream`] (shard-router's): the stream operations on one shard (group, read,
//!   ack+delete, XAUTOCLAIM, dead letters); [`reader`]: XREADGROUP loop per shard into the bounded channel.
//! - [`writer`]: batches (max rows / max wait) → [`commit`]: one ledger transaction per
//!   batch; [`late`]: claims committed after the rebuild that did not count them.
//!   [`final_answers`]: rerouted claims' replay answers made final before the delete.
//! - [`redrive`]: `consumer redrive`, dead letters back into the ledger, idempotently.
//! - [`replica`]: wait for a replica before committing (default wherever there is one).
//! - [`recovery`]: refresh own pending entries, take over idle ones, dead-letter poison.
//! - [`campaign`]: campaigns in MySQL, preheat into Redis, status.
//! - [`release`]: confirm / cancel / payment-timeout release, idempotent end to end.
//! - [`reconcile`]: invariant `books-close` (docs/DESIGN.md) per SKU, exact under load; excess removal; stale holds.
//! - [`wave`]: stock waves; [`closeout`]: closing report and Redis cleanup; [`times`]:
//!   human times on the command line; [`series`]: closed SKUs' series left out of /metrics.
//! - [`rebuild`]: Redis written back from the ledger after a loss (preheat, CLI, watch);
//!   [`flush`]: the consumer's heartbeat and its half of the rebuild's flush handshake.
//! - [`startup`]: waiting out a Redis that is still coming up.
//! - [`admin`]: `/healthz`, `/metrics`, the token-protected admin API; [`health`]: the
//!   MySQL and Redis probes behind `/healthz`.
//! - [`service`]: wires the tasks together with one shutdown signal.

pub mod admin;
pub mod campaign;
pub mod cli;
pub mod clock;
pub mod closeout;
pub mod commit;
pub mod config;
mod db;
mod error;
pub mod final_answers;
pub mod flush;
pub mod health;
pub mod housekeeping;
pub mod inflight;
pub mod late;
pub mod memory;
pub mod metrics;
pub mod reader;
pub mod rebuild;
pub mod reconcile;
pub mod recovery;
pub mod redrive;
pub mod release;
pub mod replica;
pub mod series;
pub mod service;
pub mod startup;
pub mod times;
pub mod wave;
pub mod writer;

// The consumer's modules name the shared plumbing and the ledger's pool by these paths.

pub use plumbing::{backoff, shutdown as signal};
pub use shard_router::stream;

pub use config::Config;
pub use error::ConsumerError;

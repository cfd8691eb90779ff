//! flashgate campaign operations: everything an operator runs on a sale, around the data
//! path of the `consumer` crate, and the consumer process that runs both.
//!
//! This crate owns a campaign's life in the ledger and in Redis: creating it and preheating
//! its stock, stock waves, the release of unpaid or cancelled claims, reconciliation of the
//! books (invariant `books-close`, docs/DESIGN.md), rebuilding Redis from the ledger after a
//! loss, close-out, the admin API and the operator CLI (`consumer poison` lists the stream
//! entries the ledger kept instead of a row). Its
//! SQL goes through the `ledger` crate's pool, its Redis through `shard-router`'s
//! `StockClient`; the streams themselves are the `consumer` crate's.
//!
//! Layout (one concept per file):
//! - [`campaign`]: campaigns in MySQL, preheat into Redis, status.
//! - [`wave`]: stock waves; [`closeout`]: closing report and Redis cleanup; [`times`]:
//!   human times on the command line; [`series`]: closed SKUs' series left out of /metrics.
//! - [`release`]: confirm / cancel / payment-timeout release, idempotent end to end.
//! - [`reconcile`]: invariant `books-close` per SKU, exact under load; excess removal;
//!   stale holds.
//! - [`rebuild`]: Redis written back from the ledger after a loss (preheat, CLI, watch).
//! - [`poison`]: poison entries replayed once their cause is fixed.
//! - [`housekeeping`]: the periodic waves, close-outs and memory checks of a running process.
//! - [`admin`]: `/healthz`, `/metrics`, the token-protected admin API; [`health`]: the
//!   MySQL and Redis probes behind `/healthz`; [`cli`]: the operator's command line.
//! - [`service`]: the consumer process: the data path and these loops under one shutdown
//!   signal.

pub mod admin;
pub mod campaign;
pub mod cli;
pub mod clock;
pub mod closeout;
pub mod config;
pub mod draw;
mod error;
pub mod health;
pub mod housekeeping;
pub mod memory;
pub mod metrics;
pub mod poison;
pub mod queue;
pub mod rebuild;
pub mod reconcile;
pub mod release;
pub mod series;
pub mod service;
pub mod sku;
pub mod times;
pub mod wave;

pub use config::Config;
pub use error::OpsError;

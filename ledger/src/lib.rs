//! flashgate's ledger: the truth of a sale, in MySQL/MariaDB (docs/DESIGN.md "Ledger").
//!
//! This crate owns the schema (the migrations in `ledger/migrations`, applied at start by
//! [`pool::migrate`]), the connection pool, and every statement on claims, campaigns, stock,
//! waves, releases, close-out, reconciliation runs, rebuilds, consumers, anomalies and late
//! claims. It has no Redis and knows nothing of streams or scripts: the consumer (streams
//! into the ledger) and the campaign operations call it, and every bounded wait on MySQL
//! goes through [`pool::bounded`].
//!
//! - [`pool`]: the pool, the migrations, the bound on every statement; [`cause`]: why a
//!   statement failed (the server's state, the row, or a bug), decided in one place.
//! - [`rows`]: a claim's row, written and read back.
//! - [`claims`]: a batch of claims in one transaction (insert, stock taken, collisions).
//! - [`late`]: claims committed after the rebuild that did not count them.
//! - [`campaigns`]: campaigns, their lifecycle and their available stock.
//! - [`books`]: the ledger's reads of a reconciliation.
//! - [`reconcile_runs`]: each reconciliation's stored result, the last few kept.
//! - [`waves`]: stock waves, scheduled, placed in the release order and applied.
//! - [`releases`]: a claim's payment and release, and its units back to the stock.
//! - [`closing`]: a campaign's close-out (closing, its report, closed).
//! - [`health`]: the liveness probe.
//! - [`rebuild`]: a rebuild's reads under the campaign row, its generation bump, and the
//!   watch's candidates.
//! - [`consumers`]: the consumers' heartbeat rows and the flush handshake's counter.
//! - [`places`]: each claims stream's place and lease, moved with the rows read up to it;
//!   [`poison`]: the entries passed without a row; [`replay`]: one applied once its cause
//!   is fixed.
//! - [`queues`]: a queue campaign's admitted watermark and marks, kept past a Redis loss.
//! - [`anomalies`]: what the books disagree on.
//! - [`draws`]: draw campaigns (a verifiable raffle): their terms, entries read from the
//!   entries streams with the streams' places, the ranks drawn and how far they are granted.

pub mod anomalies;
pub mod books;
pub mod campaigns;
pub mod cause;
pub mod claims;
pub mod closing;
pub mod consumers;
pub mod draws;
mod error;
pub mod health;
mod id_reuse;
pub mod late;
pub mod places;
pub mod poison;
pub mod pool;
pub mod queues;
pub mod rebuild;
pub mod reconcile_runs;
pub mod releases;
pub mod replay;
mod row_buckets;
pub mod rows;
pub mod waves;

pub use cause::Cause;
pub use claims::Stored;
pub use error::{db, db_retryable, LedgerError};
pub use rows::{Claim, ClaimRow};

//! flashgate's ledger: the truth of a sale, in MySQL/MariaDB (docs/DESIGN.md "Ledger").
//!
//! This crate owns the schema (the migrations in `ledger/migrations`, applied at start by
//! [`pool::migrate`]), the connection pool, and the statements on claims, campaigns, stock,
//! waves, reconciliation runs, anomalies and late claims. It has no Redis and knows nothing
//! of streams or scripts: the consumer (streams into the ledger) and the campaign
//! operations call it, and every bounded wait on MySQL goes through [`pool::bounded`].
//!
//! - [`pool`]: the pool, the migrations, the bound on every statement.
//! - [`rows`]: a claim's row, written and read back.
//! - [`claims`]: a batch of claims in one transaction (insert, stock taken, collisions).
//! - [`late`]: claims committed after the rebuild that did not count them.
//! - [`campaigns`]: campaigns, their lifecycle and their available stock.
//! - [`books`]: the ledger's reads of a reconciliation.
//! - [`rebuild`]: a rebuild's reads under the campaign row, its generation bump, and the
//!   watch's candidates.
//! - [`consumers`]: the consumers' heartbeat rows, the flush handshake's counter, and
//!   recovery's look-up of a claim id.
//! - [`anomalies`]: what the books disagree on.

pub mod anomalies;
pub mod books;
pub mod campaigns;
pub mod claims;
pub mod consumers;
mod error;
pub mod late;
pub mod pool;
pub mod rebuild;
mod row_buckets;
pub mod rows;

pub use claims::Stored;
pub use error::{db, db_retryable, LedgerError};
pub use rows::{Claim, ClaimRow};

//! A claim's row in `claims`: as a batch writes it (borrowed from its stream record), as it
//! is read back, and how many rows one INSERT may carry.

/// Rows per batch when not configured. Big enough that one commit (one fsync) carries many
/// claims, small enough that a batch commits in a few ms.
pub const DEFAULT_BATCH_MAX_ROWS: usize = 1000;
/// Columns per claims row; MySQL allows 65 535 placeholders per statement.
pub const CLAIM_COLUMNS: usize = 11;
/// Rows one INSERT can carry within the placeholder limit: the most a batch may hold.
pub const MAX_BATCH_ROWS: usize = 65_535 / CLAIM_COLUMNS;
// One batch must fit one INSERT, and the default must be a valid setting.
const _: () = assert!(MAX_BATCH_ROWS * CLAIM_COLUMNS <= 65_535);
const _: () = assert!(DEFAULT_BATCH_MAX_ROWS <= MAX_BATCH_ROWS);

/// A claim as the ledger stores it, borrowed from the stream record it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimRow<'a> {
    /// `<shard>-<stream entry id>`, the primary key.
    pub claim_id: &'a str,
    pub sku: u64,
    pub user: &'a str,
    pub qty: u32,
    /// The user's running claim number for this SKU; a second claim id on one
    /// `(sku, user, user_seq)` is a collision.
    pub user_seq: u64,
    /// Shard whose slice gave the units.
    pub shard: u16,
    /// The user's home shard.
    pub home: u16,
    pub request_id: Option<&'a str>,
    /// Gateway clock at claim time, ms since the epoch.
    pub ts_ms: i64,
    /// Rebuild generation of the shard when the claim was taken.
    pub gen: u64,
}

/// The `claims` columns of a [`Claim`], for a query that names the table `c`. `user_id` and
/// `request_id` have a binary collation; sqlx decodes only text as `String`.
pub const COLUMNS: &str = "c.claim_id, c.sku, CAST(c.user_id AS CHAR) AS user_id, \
     c.user_seq, c.qty, c.shard, c.home, CAST(c.request_id AS CHAR) AS request_id, c.claimed_ms, \
     c.gen AS record_gen";

/// A claim read back from the ledger (select [`COLUMNS`]).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Claim {
    pub claim_id: String,
    pub sku: u64,
    pub user_id: String,
    pub user_seq: u64,
    pub qty: u32,
    pub shard: u16,
    pub home: u16,
    pub request_id: Option<String>,
    pub claimed_ms: i64,
    /// The record's generation (`ClaimRow::gen`; 0 for a row written before it was kept).
    /// Named apart from `late_claims.gen`, which a query may select beside it.
    pub record_gen: u64,
}

//! A ledger row read back as the claim record it was written from: the rebuild's ledger
//! pages and the late-claims sweep select the same columns into the same struct.

use shard_router::ClaimRecord;

/// The `claims` columns of a record, for a query that names the table `c`. `user_id` and
/// `request_id` have a binary collation; sqlx decodes only text as `String`.
pub(super) const COLUMNS: &str = "c.claim_id, c.sku, CAST(c.user_id AS CHAR) AS user_id, \
     c.user_seq, c.qty, c.shard, c.home, CAST(c.request_id AS CHAR) AS request_id, c.claimed_ms";

#[derive(Debug, sqlx::FromRow)]
pub(super) struct LedgerRecord {
    pub(super) claim_id: String,
    sku: u64,
    user_id: String,
    user_seq: u64,
    qty: u32,
    shard: u16,
    home: u16,
    request_id: Option<String>,
    claimed_ms: i64,
}

impl From<LedgerRecord> for ClaimRecord {
    fn from(r: LedgerRecord) -> Self {
        ClaimRecord {
            claim_id: r.claim_id,
            sku: r.sku,
            user: r.user_id,
            qty: r.qty,
            user_seq: r.user_seq,
            shard: r.shard,
            home: r.home,
            request_id: r.request_id,
            ts_ms: r.claimed_ms,
            // A row's generation mattered when it was written; read back, it is counted.
            gen: 0,
        }
    }
}

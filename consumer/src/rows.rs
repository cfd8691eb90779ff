//! A claim record as the ledger's row, and a ledger row back as the record.

use ledger::{Claim, ClaimRow};
use shard_router::ClaimRecord;

/// The ledger's row of a record.
pub fn row(r: &ClaimRecord) -> ClaimRow<'_> {
    ClaimRow {
        claim_id: &r.claim_id,
        sku: r.sku,
        user: &r.user,
        qty: r.qty,
        user_seq: r.user_seq,
        shard: r.shard,
        home: r.home,
        request_id: r.request_id.as_deref(),
        ts_ms: r.ts_ms,
        gen: r.gen,
    }
}

/// A ledger row read back as the claim record it was written from.
pub fn record(c: Claim) -> ClaimRecord {
    ClaimRecord {
        claim_id: c.claim_id,
        sku: c.sku,
        user: c.user_id,
        qty: c.qty,
        user_seq: c.user_seq,
        shard: c.shard,
        home: c.home,
        request_id: c.request_id,
        ts_ms: c.claimed_ms,
        // The record's own: it names the claim's hold (`lua/claim.lua`), which the rebuild
        // (`campaign-ops/src/rebuild/image.rs`) and a late claim's apply from the sweep
        // (`lua/rebuild_late.lua` ARGV[13]) tell from another request's hold by it.
        gen: c.record_gen,
    }
}

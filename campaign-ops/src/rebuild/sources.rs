//! What a rebuild reads: the claims still in flight (the streams) and the ledger's claims
//! of the SKU, a bounded page at a time.

use std::collections::HashMap;
use std::time::Duration;

use shard_router::codec::{ClaimId, EntryId};
use shard_router::{ClaimRecord, StockClient};
use sqlx::{MySql, Transaction};

use super::image::{Known, Seen};
use crate::OpsError;
use shard_router::stream::{self, ShardStream};

/// Entries per XRANGE page.
const PAGE: usize = 1000;
/// Ledger rows per page of the rebuild's read (keyset pagination on the claim id).
pub(super) const LEDGER_PAGE: usize = 5000;

/// Claims of `sku` in the shard streams: acknowledged claims not (or not yet known to be)
/// in the ledger, one record per claim id (committed ones stay until a trim: the callers
/// skip what the ledger holds). Also what stale-hold resolution (`reconcile/holds.rs`)
/// looks in before undoing a hold. A poison entry (a record of an unknown version
/// included) is no claim here: the consumer keeps it in the ledger's `stream_poison` with
/// an anomaly, and `consumer poison replay` brings it in once a reader knows it.
pub(crate) async fn in_flight(
    client: &StockClient,
    streams: &[ShardStream],
    sku: u64,
) -> Result<Vec<ClaimRecord>, OpsError> {
    let mut out: HashMap<String, ClaimRecord> = HashMap::new();
    for s in streams {
        for entry in s.all_entries(client, PAGE).await? {
            if let Ok(d) = stream::decode(s.shard, &entry) {
                if d.record.sku == sku {
                    out.insert(d.record.claim_id.clone(), d.record);
                }
            }
        }
    }
    Ok(out.into_values().collect())
}

/// Every ledger claim of `sku` with its standing, read in `tx` (one snapshot) by pages of
/// `page` rows, so no single statement outlives its bound however large the ledger.
pub(super) async fn ledger_claims(
    tx: &mut Transaction<'_, MySql>,
    sku: u64,
    page: usize,
    t: Duration,
) -> Result<Vec<Known>, OpsError> {
    let mut out = Vec::new();
    let mut after = String::new();
    loop {
        let rows = ledger::rebuild::claims_page(tx, sku, &after, page, t).await?;
        let n = rows.len();
        if let Some(last) = rows.last() {
            after = last.claim.claim_id.clone();
        }
        out.extend(rows.into_iter().map(|r| Known {
            seen: if r.active() {
                Seen::Active
            } else {
                Seen::Released
            },
            record: consumer::rows::record(r.claim),
        }));
        if n < page {
            return Ok(out);
        }
    }
}

/// The highest entry id of any claim the ledger holds from each of `shards`' claims
/// streams, over every SKU: a stream is the shard's, shared by all SKUs placed there, and
/// claim ids are the ledger's primary key across SKUs, so the stream's last id must not
/// fall below another SKU's ids either (a closed campaign is never rebuilt to raise it).
pub(super) async fn stream_floors(
    tx: &mut Transaction<'_, MySql>,
    shards: &[u16],
    t: Duration,
) -> Result<HashMap<u16, EntryId>, OpsError> {
    let mut out = HashMap::new();
    for &shard in shards {
        // Two reads on the primary key (claim_id = "<shard>-<ms>-<seq>"), never a scan of
        // the shard's claims under the campaign lock: the greatest id as text has the
        // greatest ms (13 digits until the year 2286); the seqs of that ms are then few, and
        // compared as numbers ("-10" sorts below "-9" as text).
        let top = ledger::rebuild::stream_top(tx, shard, t).await?;
        let Some(top) = top.as_deref().and_then(ClaimId::parse) else {
            continue;
        };
        let same_ms = ledger::rebuild::stream_same_ms(tx, shard, top.entry().0, t).await?;
        let floor = same_ms
            .iter()
            .filter_map(|id| ClaimId::parse(id))
            .filter(|id| id.shard() == shard)
            .map(|id| id.entry())
            .max()
            .unwrap_or(top.entry());
        out.insert(shard, floor);
    }
    Ok(out)
}

//! A claim id the ledger holds under another claim. A claim id is `<shard>-<stream entry
//! id>`, unique while a master keeps its data; a master that lost its last writes and runs
//! on a clock behind the old one can hand out an entry id the ledger already holds for
//! another user. That record's client was told 201 with a claim id that names someone
//! else's row: a unit sold beyond the ledger, which an insert ignored by claim id would
//! file as a redelivery and forget. The vouch fence (`lua/guard.lua`) keeps such a master
//! from selling until the rebuild raised its stream's last id past the ledger's, so this
//! is the second line: found, recorded as a critical anomaly with the whole record (the
//! claims table can keep one row per claim id), never silent.

use std::collections::HashMap;
use std::time::Duration;

use sqlx::{MySql, QueryBuilder, Transaction};

use crate::anomalies::anomaly;
use crate::error::LedgerError;
use crate::pool::bounded;
use crate::rows::ClaimRow;

/// Of `rows[which]` (claim ids the ledger holds), those whose stored row is another claim:
/// another SKU, user or sequence. Each gets a critical `id_reuse` anomaly.
pub(crate) async fn record_reused(
    tx: &mut Transaction<'_, MySql>,
    rows: &[ClaimRow<'_>],
    which: &[usize],
    timeout: Duration,
) -> Result<Vec<usize>, LedgerError> {
    if which.is_empty() {
        return Ok(Vec::new());
    }
    let mut q = QueryBuilder::<MySql>::new(
        "SELECT claim_id, sku, CAST(user_id AS CHAR), user_seq FROM claims WHERE claim_id IN (",
    );
    let mut list = q.separated(", ");
    for &i in which {
        list.push_bind(rows[i].claim_id);
    }
    q.push(")");
    let stored: Vec<(String, u64, String, u64)> = bounded(
        "read reused claim ids",
        timeout,
        q.build_query_as().fetch_all(&mut **tx),
    )
    .await?;
    let stored: HashMap<String, (u64, String, u64)> = stored
        .into_iter()
        .map(|(id, sku, user, seq)| (id, (sku, user, seq)))
        .collect();
    let mut reused = Vec::new();
    for &i in which {
        let r = &rows[i];
        let Some((sku, user, seq)) = stored.get(r.claim_id) else {
            continue;
        };
        if (*sku, user.as_str(), *seq) == (r.sku, r.user, r.user_seq) {
            continue;
        }
        let detail = format!(
            "CRITICAL: claim id {} is in the ledger for (sku {sku}, user {user}, user_seq {seq}) \
             and was handed out again by Redis for (sku {}, user {}, user_seq {}, qty {}, shard {}, \
             home {}, request_id {:?}, claimed_ms {}): that client was told 201 with another \
             user's claim id; the unit is sold beyond the ledger; its shard's Redis went back in time",
            r.claim_id, r.sku, r.user, r.user_seq, r.qty, r.shard, r.home, r.request_id, r.ts_ms
        );
        tracing::error!(claim = %r.claim_id, sku = r.sku, user = %r.user, seq = r.user_seq, "claim id reused by another claim");
        let reference = format!("{}|{}|{}", r.claim_id, r.user, r.user_seq);
        anomaly(
            &mut **tx,
            "id_reuse",
            &reference,
            Some(r.sku),
            &detail,
            timeout,
        )
        .await?;
        reused.push(i);
    }
    Ok(reused)
}

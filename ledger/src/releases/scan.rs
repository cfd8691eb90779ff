//! The payment-timeout scan: which claims a release sweep takes next.
//!
//! A claim is due when it is `pending` and `claimed_ms + payment_timeout_s * 1000 <= now`
//! (its campaign's timeout), or when it was left `releasing`; claims of a SKU with no
//! campaign row are never due. Written as that one predicate over `claims JOIN campaigns`,
//! no index serves it, and every scan read every claim held (docs/BENCHMARKS.md, "Capacity
//! from counts"). So the timeouts are read first (one row per campaign) and each turned
//! into a constant cutoff, `claimed_ms <= now - payment_timeout_s * 1000`: a range per
//! campaign on `claims_status (status, sku, claimed_ms)` that ends at its first claim not
//! due, so a scan reads the claims due and one index probe per campaign.

use std::collections::HashSet;
use std::time::Duration;

use sqlx::{MySql, MySqlPool, MySqlTransaction, QueryBuilder};

use crate::error::LedgerError;
use crate::pool::bounded;

/// Campaigns per statement: two placeholders each, far below the protocol's 65 535 per
/// statement, and a statement text of some 20 kB at most.
const CAMPAIGNS_PER_STATEMENT: usize = 500;

/// A due claim: `(claim id, shard, home)`.
type Due = (String, u16, u16);

/// Up to `limit` due claims (pending past their campaign's payment timeout at `now_ms`, or
/// left `releasing`) as `(claim id, shard, home)`, none with its shard or home in `skip`:
/// the `releasing` ones first, then the pending ones by SKU, oldest first.
pub async fn due(
    pool: &MySqlPool,
    now_ms: i64,
    skip: &HashSet<u16>,
    limit: i64,
    t: Duration,
) -> Result<Vec<Due>, LedgerError> {
    // One transaction, so every read below sees one snapshot (InnoDB's REPEATABLE READ, the
    // server's default: the first read takes it), as the single statement this replaces
    // did: a timeout changed in between cannot make a claim due that was not.
    let mut tx = bounded("begin", t, pool.begin()).await?;
    let mut out = releasing(&mut tx, skip, limit, t).await?;
    let timeouts: Vec<(u64, u32)> = bounded(
        "campaign timeouts",
        t,
        sqlx::query_as("SELECT sku, payment_timeout_s FROM campaigns ORDER BY sku")
            .fetch_all(&mut *tx),
    )
    .await?;
    let cutoffs = cutoffs(&timeouts, now_ms);
    for part in cutoffs.chunks(CAMPAIGNS_PER_STATEMENT) {
        let left = limit - out.len() as i64;
        if left <= 0 {
            break;
        }
        out.extend(pending(&mut tx, part, skip, left, t).await?);
    }
    bounded("commit", t, tx.commit()).await?;
    Ok(out)
}

/// `(sku, latest claimed_ms due at now_ms)` per campaign. `now - timeout * 1000` is exact in
/// an i64 (a timeout is at most 2^32 - 1 s); below i64::MIN no claim of it is due, so it is
/// left out. For any `claimed_ms >= 0` (Redis's clock) this is the old predicate exactly;
/// a negative one whose sum is negative made the old statement fail (MariaDB evaluates
/// `claimed_ms + payment_timeout_s * 1000` as BIGINT UNSIGNED: error 1690), here it is due.
fn cutoffs(timeouts: &[(u64, u32)], now_ms: i64) -> Vec<(u64, i64)> {
    timeouts
        .iter()
        .filter_map(|&(sku, s)| Some((sku, now_ms.checked_sub(i64::from(s) * 1000)?)))
        .collect()
}

/// The `releasing` claims of SKUs with a campaign: a ref on `claims_status`.
async fn releasing(
    tx: &mut MySqlTransaction<'_>,
    skip: &HashSet<u16>,
    limit: i64,
    t: Duration,
) -> Result<Vec<Due>, LedgerError> {
    let mut q = QueryBuilder::<MySql>::new(
        "SELECT c.claim_id, c.shard, c.home FROM claims c JOIN campaigns p ON p.sku = c.sku \
         WHERE c.status = 'releasing'",
    );
    not_in(&mut q, skip);
    q.push(" LIMIT ").push_bind(limit);
    bounded(
        "releasing claims",
        t,
        q.build_query_as().fetch_all(&mut **tx),
    )
    .await
}

/// The pending claims due of the campaigns in `cutoffs`: one range each on `claims_status`
/// (forced: the plan must not depend on the statistics of a table this skewed).
async fn pending(
    tx: &mut MySqlTransaction<'_>,
    cutoffs: &[(u64, i64)],
    skip: &HashSet<u16>,
    limit: i64,
    t: Duration,
) -> Result<Vec<Due>, LedgerError> {
    let mut q = QueryBuilder::<MySql>::new(
        "SELECT c.claim_id, c.shard, c.home FROM claims c FORCE INDEX (claims_status) \
         WHERE c.status = 'pending' AND (",
    );
    for (i, &(sku, cutoff)) in cutoffs.iter().enumerate() {
        q.push(if i == 0 { "" } else { " OR " });
        q.push("(c.sku = ").push_bind(sku);
        q.push(" AND c.claimed_ms <= ").push_bind(cutoff).push(")");
    }
    q.push(")");
    not_in(&mut q, skip);
    q.push(" LIMIT ").push_bind(limit);
    bounded("due claims", t, q.build_query_as().fetch_all(&mut **tx)).await
}

/// ` AND c.shard NOT IN (…) AND c.home NOT IN (…)` unless `skip` is empty.
fn not_in(q: &mut QueryBuilder<'_, MySql>, skip: &HashSet<u16>) {
    if skip.is_empty() {
        return;
    }
    for col in ["c.shard", "c.home"] {
        q.push(format!(" AND {col} NOT IN ("));
        let mut list = q.separated(", ");
        for s in skip {
            list.push_bind(*s);
        }
        q.push(")");
    }
}

#[cfg(test)]
mod tests {
    use super::cutoffs;

    #[test]
    fn a_cutoff_below_i64_min_leaves_its_campaign_out() {
        let t = [(1, 0), (2, 60), (3, u32::MAX)];
        assert_eq!(
            cutoffs(&t, 100_000),
            vec![(1, 100_000), (2, 40_000), (3, 100_000 - 4_294_967_295_000)]
        );
        assert_eq!(cutoffs(&t, i64::MIN + 59_999), vec![(1, i64::MIN + 59_999)]);
        assert_eq!(cutoffs(&t, i64::MIN + 60_000).len(), 2);
    }
}

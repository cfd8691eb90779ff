//! `late_claims`: claims a batch committed after the rebuild that did not count them (their
//! record's generation is older than the campaign's `rebuild_gen`), until the consumer has
//! counted them in Redis. Why and how: the consumer's `late.rs`, and docs/DESIGN.md
//! "Rebuild from the ledger".

use std::collections::HashMap;
use std::time::Duration;

use sqlx::{MySql, MySqlPool, QueryBuilder, Transaction};

use crate::error::LedgerError;
use crate::pool::bounded;
use crate::rows::{Claim, COLUMNS};

/// A late claim as [`mark`] lists it.
#[derive(Debug, Clone, Copy)]
pub struct LateRow<'a> {
    pub claim_id: &'a str,
    pub sku: u64,
    /// The generation its record carries.
    pub record_gen: u64,
    /// The campaign's rebuild generation it was judged against.
    pub gen: u64,
}

/// Each SKU's rebuild generation, read under a shared lock on its campaign row: held until
/// the batch commits, so no rebuild of these SKUs reads the ledger meanwhile. No SKU, no
/// statement: `IN ()` is a syntax error, and a batch of no rows (only places and poison)
/// would fail for good on it.
pub async fn campaign_gens(
    tx: &mut Transaction<'_, MySql>,
    skus: &[u64],
    t: Duration,
) -> Result<HashMap<u64, u64>, LedgerError> {
    if skus.is_empty() {
        return Ok(HashMap::new());
    }
    let mut q = QueryBuilder::<MySql>::new("SELECT sku, rebuild_gen FROM campaigns WHERE sku IN (");
    let mut list = q.separated(", ");
    for sku in skus {
        list.push_bind(*sku);
    }
    // Ascending key order, as every other transaction takes campaign rows.
    q.push(") ORDER BY sku LOCK IN SHARE MODE");
    let rows: Vec<(u64, u64)> = bounded(
        "campaign generations",
        t,
        q.build_query_as().fetch_all(&mut **tx),
    )
    .await?;
    Ok(rows.into_iter().collect())
}

/// Lists `late` in `late_claims`, in the batch's transaction.
pub async fn mark(
    tx: &mut Transaction<'_, MySql>,
    late: &[LateRow<'_>],
    t: Duration,
) -> Result<(), LedgerError> {
    for chunk in late.chunks(1000) {
        let mut q =
            QueryBuilder::<MySql>::new("INSERT IGNORE INTO late_claims (claim_id, sku, gen) ");
        q.push_values(chunk, |mut b, l| {
            b.push_bind(l.claim_id).push_bind(l.sku).push_bind(l.gen);
        });
        bounded("mark late claims", t, q.build().execute(&mut **tx)).await?;
    }
    for l in late {
        tracing::warn!(claim = %l.claim_id, sku = l.sku, record_gen = l.record_gen, gen = l.gen, "late claim: committed after the rebuild that did not count it");
    }
    Ok(())
}

/// Late claims of `sku` not counted in Redis yet, read under a rebuild's lock: the rebuild
/// reads them from the ledger with the rest.
pub async fn waiting(
    tx: &mut Transaction<'_, MySql>,
    sku: u64,
    t: Duration,
) -> Result<u64, LedgerError> {
    let n: i64 = bounded(
        "late claims waiting",
        t,
        sqlx::query_scalar("SELECT COUNT(*) FROM late_claims WHERE sku = ? AND applied_ms IS NULL")
            .bind(sku)
            .fetch_one(&mut **tx),
    )
    .await?;
    Ok(n.max(0) as u64)
}

/// Marks a late claim counted in Redis at `now_ms` (once).
pub async fn applied(
    pool: &MySqlPool,
    claim_id: &str,
    now_ms: i64,
    t: Duration,
) -> Result<(), LedgerError> {
    bounded(
        "late claim applied",
        t,
        sqlx::query(
            "UPDATE late_claims SET applied_ms = ? WHERE claim_id = ? AND applied_ms IS NULL",
        )
        .bind(now_ms)
        .bind(claim_id)
        .execute(pool),
    )
    .await
    .map(drop)
}

#[derive(sqlx::FromRow)]
struct Row {
    #[sqlx(flatten)]
    claim: Claim,
    gen: u64,
}

/// Up to `limit` late claims not counted in Redis yet (of `sku`, or of every SKU), with a
/// claim id above `after`, in claim id order, each with the generation it was judged
/// against. A closed campaign's are left out: it has no Redis state left to count them in.
pub async fn page(
    pool: &MySqlPool,
    sku: Option<u64>,
    after: &str,
    limit: i64,
    t: Duration,
) -> Result<Vec<(Claim, u64)>, LedgerError> {
    let mut q = QueryBuilder::<MySql>::new(format!(
        "SELECT {COLUMNS}, l.gen FROM late_claims l JOIN claims c ON c.claim_id = l.claim_id \
         JOIN campaigns k ON k.sku = l.sku AND k.closed_ms IS NULL \
         WHERE l.applied_ms IS NULL AND l.claim_id > "
    ));
    q.push_bind(after);
    if let Some(sku) = sku {
        q.push(" AND l.sku = ").push_bind(sku);
    }
    q.push(" ORDER BY l.claim_id LIMIT ").push_bind(limit);
    let rows: Vec<Row> = bounded("late claims", t, q.build_query_as().fetch_all(pool)).await?;
    Ok(rows.into_iter().map(|r| (r.claim, r.gen)).collect())
}

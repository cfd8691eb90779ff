//! One batch of stream entries → one MySQL transaction: a multi-row `INSERT IGNORE` into
//! claims, the guarded stock UPDATE per SKU, and a critical anomaly for every collision (a
//! second claim id on one `(sku, user, user_seq)`, kept as its own row: see
//! `migrations/0013_claim_collisions.sql`). Safe to run twice with the same entries
//! (redelivery): rows that exist under the same claim id are recognised and change nothing.
//!
//! Each batch first takes a shared lock on the `campaigns` rows of its SKUs and reads their
//! rebuild generation: a rebuild holds the row exclusively while it reads the ledger, so a
//! batch commits either before that read (the rebuild sees it) or after the rebuild's
//! commit, and then every record it inserts from before that rebuild is a late claim
//! (`rebuild/late.rs`). Lock order everywhere: `campaigns`, then `sku_stock`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use shard_router::ClaimRecord;
use sqlx::{MySql, MySqlPool, QueryBuilder, Transaction};

use crate::config::CLAIM_COLUMNS;
use crate::db::bounded;
use crate::error::ConsumerError;
use crate::rebuild::late::{self, LateClaim};
use crate::row_buckets;

/// What a committed batch did.
#[derive(Debug, Default, Clone)]
pub struct BatchOutcome {
    /// Rows this batch inserted.
    pub inserted: usize,
    /// Entries already in the ledger under the same claim id (a redelivery).
    pub redelivered: usize,
    /// Records inserted although another claim id already holds their
    /// `(sku, user, user_seq)`: both were acknowledged, so both rows are kept (and counted
    /// in `inserted`); each is a critical `collision` anomaly for an operator.
    pub collisions: Vec<ClaimRecord>,
    /// Units of the rows inserted (collisions included).
    pub inserted_units: u64,
    /// Inserted records the last rebuild of their SKU did not count (older generation):
    /// listed in `late_claims`, to be counted in Redis after the commit.
    pub late: Vec<LateClaim>,
}

/// A process-unique, practically globally unique batch id: tells a batch which rows it
/// inserted itself without reading back every row.
pub fn next_batch_id() -> u64 {
    static BASE: OnceLock<u64> = OnceLock::new();
    static N: AtomicU64 = AtomicU64::new(0);
    let base = *BASE.get_or_init(|| {
        std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish()
    });
    base.wrapping_add(N.fetch_add(1, Ordering::Relaxed))
}

/// Writes `records` (at most [`crate::config::MAX_BATCH_ROWS`]) in one transaction.
pub async fn write_batch(
    pool: &MySqlPool,
    records: &[ClaimRecord],
    timeout: Duration,
) -> Result<BatchOutcome, ConsumerError> {
    let refs: Vec<&ClaimRecord> = records.iter().collect();
    write_refs(pool, &refs, timeout).await
}

/// [`write_batch`] over borrowed records (the writer's batches own theirs elsewhere).
pub async fn write_refs(
    pool: &MySqlPool,
    records: &[&ClaimRecord],
    timeout: Duration,
) -> Result<BatchOutcome, ConsumerError> {
    // A batch can carry the same entry twice (read, then recovered); one copy is enough.
    let mut seen = HashSet::new();
    let records: Vec<&ClaimRecord> = records
        .iter()
        .copied()
        .filter(|r| seen.insert(r.claim_id.as_str()))
        .collect();
    if records.is_empty() {
        return Ok(BatchOutcome::default());
    }
    let mut tx = bounded("begin", timeout, pool.begin()).await?;
    let skus: Vec<u64> = records
        .iter()
        .map(|r| r.sku)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let gens = late::campaign_gens(&mut tx, &skus, timeout).await?;
    let out = store(&mut tx, &records, Some(&gens), timeout).await?;
    bounded("commit", timeout, tx.commit()).await?;
    Ok(out)
}

/// Inserts `records` (distinct claim ids) and takes their units from `sku_stock`, inside
/// `tx`: the one write of claims into the ledger, used by batches and by a rebuild for the
/// claims it finds in flight. With `gens` (each SKU's rebuild generation, read under the
/// campaign row lock), inserted records of an older generation are marked late.
pub(crate) async fn store(
    tx: &mut Transaction<'_, MySql>,
    records: &[&ClaimRecord],
    gens: Option<&HashMap<u64, u64>>,
    timeout: Duration,
) -> Result<BatchOutcome, ConsumerError> {
    if records.is_empty() {
        return Ok(BatchOutcome::default());
    }
    debug_assert!(records.len() * CLAIM_COLUMNS <= 65_535);
    let batch_id = next_batch_id();

    let mut insert = QueryBuilder::<MySql>::new(
        "INSERT IGNORE INTO claims \
         (claim_id, sku, user_id, user_seq, qty, shard, home, request_id, claimed_ms, batch_id) ",
    );
    // Padded with copies of the last record, which the INSERT IGNORE skips, so that the
    // statement is one sqlx has prepared before (`row_buckets.rs`).
    let rows = row_buckets::padded_rows(records.len(), row_buckets::cap_for(records.len()));
    let padding = std::iter::repeat_n(records[records.len() - 1], rows - records.len());
    insert.push_values(records.iter().copied().chain(padding), |mut b, r| {
        b.push_bind(&r.claim_id)
            .push_bind(r.sku)
            .push_bind(&r.user)
            .push_bind(r.user_seq)
            .push_bind(r.qty)
            .push_bind(r.shard)
            .push_bind(r.home)
            .push_bind(r.request_id.as_deref())
            .push_bind(r.ts_ms)
            .push_bind(batch_id);
    });
    let affected = bounded("insert claims", timeout, insert.build().execute(&mut **tx))
        .await?
        .rows_affected() as usize;

    let mut out = BatchOutcome::default();
    let mut inserted: Vec<&ClaimRecord> = if affected == records.len() {
        records.to_vec()
    } else {
        let ours = ids_where(tx, records, Some(batch_id), timeout).await?;
        let others: Vec<&ClaimRecord> = records
            .iter()
            .copied()
            .filter(|r| !ours.contains(&r.claim_id))
            .collect();
        let existing = ids_where(tx, &others, None, timeout).await?;
        for r in others {
            if existing.contains(&r.claim_id) {
                out.redelivered += 1;
            } else {
                out.collisions.push(r.clone());
            }
        }
        records
            .iter()
            .copied()
            .filter(|r| ours.contains(&r.claim_id))
            .collect()
    };
    // A collision is an acknowledged claim like any other: its own row, its own units.
    let mut stored = Vec::new();
    for c in std::mem::take(&mut out.collisions) {
        if !insert_collision(tx, &c, batch_id, timeout).await? {
            // Another consumer stored this very claim id first: a redelivery after all.
            out.redelivered += 1;
            continue;
        }
        let detail = format!(
            "CRITICAL: claim {} reuses (sku {}, user {}, user_seq {}) of another claim in the ledger; \
             both are kept (Redis lost the user's sequence); the user may hold more than the limit",
            c.claim_id, c.sku, c.user, c.user_seq
        );
        tracing::error!(claim = %c.claim_id, sku = c.sku, user = %c.user, seq = c.user_seq, "claim collision: both claims kept");
        anomaly(
            &mut **tx,
            "collision",
            &c.claim_id,
            Some(c.sku),
            &detail,
            timeout,
        )
        .await?;
        stored.push(c);
    }
    out.collisions = stored;
    inserted.extend(out.collisions.iter());
    out.inserted = inserted.len();

    let mut per_sku: BTreeMap<u64, u64> = BTreeMap::new();
    for r in &inserted {
        *per_sku.entry(r.sku).or_default() += u64::from(r.qty);
    }
    out.inserted_units = per_sku.values().sum();
    if let Some(gens) = gens {
        out.late = inserted
            .iter()
            .filter_map(|r| {
                let gen = gens.get(&r.sku).copied().unwrap_or(0);
                (r.gen < gen).then(|| LateClaim {
                    record: (*r).clone(),
                    gen,
                })
            })
            .collect();
        late::mark(tx, &out.late, timeout).await?;
    }
    for (sku, units) in per_sku {
        take_stock(tx, sku, units, batch_id, timeout).await?;
    }
    Ok(out)
}

/// Stores a colliding record under its own claim id as the `collides` part of the unique
/// key. False when the claim id is already there (a concurrent batch stored it first).
async fn insert_collision(
    tx: &mut Transaction<'_, MySql>,
    r: &ClaimRecord,
    batch_id: u64,
    timeout: Duration,
) -> Result<bool, ConsumerError> {
    bounded(
        "insert collision",
        timeout,
        sqlx::query(
            "INSERT IGNORE INTO claims \
             (claim_id, sku, user_id, user_seq, qty, shard, home, request_id, claimed_ms, batch_id, collides) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&r.claim_id)
        .bind(r.sku)
        .bind(&r.user)
        .bind(r.user_seq)
        .bind(r.qty)
        .bind(r.shard)
        .bind(r.home)
        .bind(r.request_id.as_deref())
        .bind(r.ts_ms)
        .bind(batch_id)
        .bind(&r.claim_id)
        .execute(&mut **tx),
    )
    .await
    .map(|done| done.rows_affected() == 1)
}

/// The guarded UPDATE: the ledger's available count can never go negative. When the
/// guard trips (more claims than the campaign's stock, or no campaign row), the claims stay
/// recorded (they were acknowledged) and the disagreement becomes an anomaly.
async fn take_stock(
    tx: &mut Transaction<'_, MySql>,
    sku: u64,
    units: u64,
    batch_id: u64,
    timeout: Duration,
) -> Result<(), ConsumerError> {
    let done = bounded(
        "update stock",
        timeout,
        sqlx::query(
            "UPDATE sku_stock SET available = available - ? WHERE sku = ? AND available >= ?",
        )
        .bind(units)
        .bind(sku)
        .bind(units)
        .execute(&mut **tx),
    )
    .await?
    .rows_affected();
    if done == 1 {
        return Ok(());
    }
    let available: Option<i64> = bounded(
        "read stock",
        timeout,
        sqlx::query_scalar("SELECT available FROM sku_stock WHERE sku = ?")
            .bind(sku)
            .fetch_optional(&mut **tx),
    )
    .await?;
    let (kind, detail) = match available {
        None => (
            "no_campaign",
            format!("{units} unit(s) claimed for sku {sku}, which has no stock row"),
        ),
        Some(a) => (
            "stock_guard",
            format!("{units} unit(s) claimed for sku {sku} with only {a} available in the ledger"),
        ),
    };
    tracing::error!(sku, units, kind, "stock guard refused a batch's units");
    anomaly(
        &mut **tx,
        kind,
        &format!("{sku}:{batch_id}"),
        Some(sku),
        &detail,
        timeout,
    )
    .await
}

/// Claim ids bound per `IN (...)` query, well inside MySQL's placeholder limit.
pub(crate) const IDS_PER_QUERY: usize = 5000;

/// `SELECT claim_id FROM claims WHERE claim_id IN (<ids>)`, open for more conditions.
pub(crate) fn claim_ids_query<'a>(
    records: impl IntoIterator<Item = &'a ClaimRecord>,
) -> QueryBuilder<'a, MySql> {
    let mut q = QueryBuilder::<MySql>::new("SELECT claim_id FROM claims WHERE claim_id IN (");
    let mut list = q.separated(", ");
    for r in records {
        list.push_bind(&r.claim_id);
    }
    q.push(")");
    q
}

/// Claim ids among `records` present in the ledger (optionally only those of `batch_id`).
async fn ids_where(
    tx: &mut Transaction<'_, MySql>,
    records: &[&ClaimRecord],
    batch_id: Option<u64>,
    timeout: Duration,
) -> Result<HashSet<String>, ConsumerError> {
    let mut found = HashSet::new();
    for chunk in records.chunks(IDS_PER_QUERY) {
        let mut q = claim_ids_query(chunk.iter().copied());
        if let Some(b) = batch_id {
            q.push(" AND batch_id = ").push_bind(b);
        }
        let rows: Vec<String> = bounded(
            "read claim ids",
            timeout,
            q.build_query_scalar().fetch_all(&mut **tx),
        )
        .await?;
        found.extend(rows);
    }
    Ok(found)
}

/// Records an anomaly once per `(kind, reference)`.
pub async fn anomaly<'c, E>(
    exec: E,
    kind: &str,
    reference: &str,
    sku: Option<u64>,
    detail: &str,
    timeout: Duration,
) -> Result<(), ConsumerError>
where
    E: sqlx::Executor<'c, Database = MySql>,
{
    metrics::counter!(crate::metrics::ANOMALIES, "kind" => kind.to_owned()).increment(1);
    bounded(
        "insert anomaly",
        timeout,
        sqlx::query("INSERT IGNORE INTO anomalies (kind, ref, sku, detail) VALUES (?, ?, ?, ?)")
            .bind(kind)
            .bind(reference)
            .bind(sku)
            .bind(detail)
            .execute(exec),
    )
    .await
    .map(drop)
}

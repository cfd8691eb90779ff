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
//! (`late.rs`). Lock order everywhere: `stream_offsets` (a consumer's batch, by stream), `campaigns`,
//! then `sku_stock`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use sqlx::{MySql, MySqlPool, QueryBuilder, Transaction};

use crate::anomalies::anomaly;
use crate::error::LedgerError;
use crate::late::{self, LateRow};
use crate::places::{self, Advance};
use crate::poison::{self, Poison};
use crate::pool::bounded;
use crate::row_buckets;

pub use crate::rows::{
    Claim, ClaimRow, CLAIM_COLUMNS, COLUMNS, DEFAULT_BATCH_MAX_ROWS, MAX_BATCH_ROWS,
};

/// What a committed batch did: the one outcome type of a batch, from the ledger to the
/// consumer's writer. Its rows are named by `R`: here by their index in the slice written;
/// the consumer names them by their claim record ([`Stored::map`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored<R = usize> {
    /// Rows this batch inserted.
    pub inserted: usize,
    /// Rows already in the ledger under the same claim id (a redelivery).
    pub redelivered: usize,
    /// Rows whose claim id the ledger holds for another claim (a `id_reuse` anomaly each,
    /// `id_reuse.rs`); not inserted.
    pub id_reused: Vec<R>,
    /// Rows inserted although another claim id already holds their
    /// `(sku, user, user_seq)`: both were acknowledged, so both rows are kept (and counted
    /// in `inserted`); each is a critical `collision` anomaly for an operator.
    pub collisions: Vec<R>,
    /// Units of the rows inserted (collisions included).
    pub inserted_units: u64,
    /// Inserted rows the last rebuild of their SKU did not count (older generation):
    /// listed in `late_claims`, to be counted in Redis after the commit.
    pub late: Vec<Late<R>>,
}

/// A claim the last rebuild of its SKU did not count (`late.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Late<R = usize> {
    pub claim: R,
    /// The campaign's rebuild generation it was judged against.
    pub gen: u64,
}

impl<R> Default for Stored<R> {
    fn default() -> Self {
        Self {
            inserted: 0,
            redelivered: 0,
            id_reused: Vec::new(),
            collisions: Vec::new(),
            inserted_units: 0,
            late: Vec::new(),
        }
    }
}

impl<R> Stored<R> {
    /// The same outcome with each row named by `name(row)` instead.
    pub fn map<T>(self, mut name: impl FnMut(R) -> T) -> Stored<T> {
        Stored {
            inserted: self.inserted,
            redelivered: self.redelivered,
            id_reused: self.id_reused.into_iter().map(&mut name).collect(),
            collisions: self.collisions.into_iter().map(&mut name).collect(),
            inserted_units: self.inserted_units,
            late: (self.late.into_iter())
                .map(|l| Late {
                    claim: name(l.claim),
                    gen: l.gen,
                })
                .collect(),
        }
    }
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

/// Writes `rows` (at most [`MAX_BATCH_ROWS`]) in one transaction: the campaign rows of
/// their SKUs taken shared for their rebuild generation, then [`store`].
pub async fn write(
    pool: &MySqlPool,
    rows: &[ClaimRow<'_>],
    timeout: Duration,
) -> Result<Stored, LedgerError> {
    match write_at(pool, rows, &[], &[], timeout).await? {
        Written::Committed(s) => Ok(s),
        Written::Fenced(_) => unreachable!("no stream moves, nothing to fence"),
    }
}

/// What [`write_at`] did.
#[derive(Debug)]
pub enum Written {
    /// Rows, poison entries and every stream move committed together.
    Committed(Stored),
    /// Nothing committed: these moves (indices into the slice given) found their stream
    /// somewhere else (another consumer's epoch or place).
    Fenced(Vec<usize>),
}

/// [`write`], with the streams' places moved in the same transaction
/// (`places::advance`) and the entries passed without a row kept (`poison::keep`): the
/// rows of a read commit exactly once, with the place after them, or not at all.
pub async fn write_at(
    pool: &MySqlPool,
    rows: &[ClaimRow<'_>],
    moves: &[Advance],
    poison: &[Poison],
    timeout: Duration,
) -> Result<Written, LedgerError> {
    // A batch can carry the same record twice (a stream read again from its start after a
    // new master); one copy is enough.
    let mut seen = HashSet::new();
    let kept: Vec<usize> = (0..rows.len())
        .filter(|&i| seen.insert(rows[i].claim_id))
        .collect();
    if kept.is_empty() && moves.is_empty() && poison.is_empty() {
        return Ok(Written::Committed(Stored::default()));
    }
    let distinct: Vec<ClaimRow<'_>> = kept.iter().map(|&i| rows[i]).collect();
    let mut tx = bounded("begin", timeout, pool.begin()).await?;
    // Places first: a fenced batch stops before any row work (and before the campaign
    // locks below). Stream rows are locked in the order given, the same for every caller
    // (the consumer sorts them by stream).
    let mut fenced = Vec::new();
    for (i, m) in moves.iter().enumerate() {
        if !places::advance(&mut tx, m, timeout).await? {
            fenced.push(i);
        }
    }
    if !fenced.is_empty() {
        bounded("rollback", timeout, tx.rollback()).await?;
        return Ok(Written::Fenced(fenced));
    }
    let skus: Vec<u64> = distinct
        .iter()
        .map(|r| r.sku)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let gens = late::campaign_gens(&mut tx, &skus, timeout).await?;
    let out = store(&mut tx, &distinct, Some(&gens), timeout).await?;
    poison::keep(&mut tx, poison, timeout).await?;
    bounded("commit", timeout, tx.commit()).await?;
    // Indices into `distinct` back to indices into `rows`.
    Ok(Written::Committed(out.map(|i| kept[i])))
}

/// Inserts `rows` (distinct claim ids) and takes their units from `sku_stock`, inside
/// `tx`: the one write of claims into the ledger, used by batches and by a rebuild for the
/// claims it finds in flight. With `gens` (each SKU's rebuild generation, read under the
/// campaign row lock), inserted rows of an older generation are marked late.
///
/// Long because it is one transaction's writes, read in their order: the insert, which rows
/// it took (this batch's, redelivered, reused, colliding), the collisions kept, then the
/// units taken and the late rows marked from exactly the rows inserted. Apart, what each
/// step relies on from the one before (the same `batch_id`, the same `inserted`) would be
/// out of sight.
pub async fn store(
    tx: &mut Transaction<'_, MySql>,
    rows: &[ClaimRow<'_>],
    gens: Option<&HashMap<u64, u64>>,
    timeout: Duration,
) -> Result<Stored, LedgerError> {
    if rows.is_empty() {
        return Ok(Stored::default());
    }
    debug_assert!(rows.len() * CLAIM_COLUMNS <= 65_535);
    // Counted once per row: a claim id given twice would be counted twice.
    debug_assert_eq!(
        rows.iter()
            .map(|r| r.claim_id)
            .collect::<HashSet<_>>()
            .len(),
        rows.len(),
        "store takes distinct claim ids"
    );
    let batch_id = next_batch_id();

    let mut insert = QueryBuilder::<MySql>::new(
        "INSERT IGNORE INTO claims \
         (claim_id, sku, user_id, user_seq, qty, shard, home, request_id, claimed_ms, gen, batch_id) ",
    );
    // Padded with copies of the last row, which the INSERT IGNORE skips, so that the
    // statement is one sqlx has prepared before (`row_buckets.rs`).
    let padded = row_buckets::padded_rows(rows.len(), row_buckets::cap_for(rows.len()));
    let padding = std::iter::repeat_n(&rows[rows.len() - 1], padded - rows.len());
    insert.push_values(rows.iter().chain(padding), |mut b, r| {
        b.push_bind(r.claim_id)
            .push_bind(r.sku)
            .push_bind(r.user)
            .push_bind(r.user_seq)
            .push_bind(r.qty)
            .push_bind(r.shard)
            .push_bind(r.home)
            .push_bind(r.request_id)
            .push_bind(r.ts_ms)
            .push_bind(r.gen)
            .push_bind(batch_id);
    });
    let affected = bounded("insert claims", timeout, insert.build().execute(&mut **tx))
        .await?
        .rows_affected() as usize;

    let mut out = Stored::default();
    let mut inserted: Vec<usize> = if affected == rows.len() {
        (0..rows.len()).collect()
    } else {
        let all: Vec<usize> = (0..rows.len()).collect();
        let ours = ids_where(tx, rows, &all, Some(batch_id), timeout).await?;
        let others: Vec<usize> = all
            .iter()
            .copied()
            .filter(|&i| !ours.contains(rows[i].claim_id))
            .collect();
        let existing = ids_where(tx, rows, &others, None, timeout).await?;
        let mut again = Vec::new();
        for i in others {
            if existing.contains(rows[i].claim_id) {
                out.redelivered += 1;
                again.push(i);
            } else {
                out.collisions.push(i);
            }
        }
        // Read again, or another claim under the same id (`id_reuse.rs`).
        out.id_reused = crate::id_reuse::record_reused(tx, rows, &again, timeout).await?;
        out.redelivered -= out.id_reused.len();
        all.into_iter()
            .filter(|&i| ours.contains(rows[i].claim_id))
            .collect()
    };
    // A collision is an acknowledged claim like any other: its own row, its own units.
    let mut stored = Vec::new();
    for i in std::mem::take(&mut out.collisions) {
        let c = &rows[i];
        if !insert_collision(tx, c, batch_id, timeout).await? {
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
            c.claim_id,
            Some(c.sku),
            &detail,
            timeout,
        )
        .await?;
        stored.push(i);
    }
    out.collisions = stored;
    inserted.extend(out.collisions.iter().copied());
    out.inserted = inserted.len();

    let mut per_sku: BTreeMap<u64, u64> = BTreeMap::new();
    for &i in &inserted {
        *per_sku.entry(rows[i].sku).or_default() += u64::from(rows[i].qty);
    }
    out.inserted_units = per_sku.values().sum();
    if let Some(gens) = gens {
        out.late = inserted
            .iter()
            .filter_map(|&i| {
                let gen = gens.get(&rows[i].sku).copied().unwrap_or(0);
                (rows[i].gen < gen).then_some(Late { claim: i, gen })
            })
            .collect();
        let late: Vec<LateRow<'_>> = out
            .late
            .iter()
            .map(|&Late { claim: i, gen }| LateRow {
                claim_id: rows[i].claim_id,
                sku: rows[i].sku,
                record_gen: rows[i].gen,
                gen,
            })
            .collect();
        late::mark(tx, &late, timeout).await?;
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
    r: &ClaimRow<'_>,
    batch_id: u64,
    timeout: Duration,
) -> Result<bool, LedgerError> {
    bounded(
        "insert collision",
        timeout,
        sqlx::query(
            "INSERT IGNORE INTO claims \
             (claim_id, sku, user_id, user_seq, qty, shard, home, request_id, claimed_ms, gen, batch_id, collides) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(r.claim_id)
        .bind(r.sku)
        .bind(r.user)
        .bind(r.user_seq)
        .bind(r.qty)
        .bind(r.shard)
        .bind(r.home)
        .bind(r.request_id)
        .bind(r.ts_ms)
        .bind(r.gen)
        .bind(batch_id)
        .bind(r.claim_id)
        .execute(&mut **tx),
    )
    .await
    .map(|done| done.rows_affected() == 1)
}

/// The guarded UPDATE: the ledger's available count can never go negative. Units come back
/// to it before Redis can sell them again (a release as it starts,
/// `releases::mark_releasing`), so the guard trips only on a real excess: more units claimed
/// than the campaign released, or no campaign row. The claims stay recorded (they were
/// acknowledged): the batch takes what the ledger still had, and the excess becomes an
/// anomaly.
async fn take_stock(
    tx: &mut Transaction<'_, MySql>,
    sku: u64,
    units: u64,
    batch_id: u64,
    timeout: Duration,
) -> Result<(), LedgerError> {
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
        sqlx::query_scalar("SELECT available FROM sku_stock WHERE sku = ? FOR UPDATE")
            .bind(sku)
            .fetch_optional(&mut **tx),
    )
    .await?;
    let (kind, detail) = match available {
        None => (
            "no_campaign",
            format!("{units} unit(s) claimed for sku {sku}, which has no stock row"),
        ),
        Some(a) => {
            bounded(
                "update stock",
                timeout,
                sqlx::query("UPDATE sku_stock SET available = 0 WHERE sku = ?")
                    .bind(sku)
                    .execute(&mut **tx),
            )
            .await?;
            (
                "stock_guard",
                format!(
                    "{units} unit(s) claimed for sku {sku} with only {a} available in the ledger: \
                     {} unit(s) beyond its stock",
                    units as i64 - a
                ),
            )
        }
    };
    tracing::error!(
        sku,
        units,
        kind,
        "stock guard: a batch claimed beyond the ledger's stock"
    );
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
pub const IDS_PER_QUERY: usize = 5000;

/// `SELECT claim_id FROM claims WHERE claim_id IN (<ids>)`, open for more conditions;
/// `None` for no ids (`IN ()` is a syntax error: nothing to ask).
pub fn claim_ids_query<'a>(
    ids: impl IntoIterator<Item = &'a str>,
) -> Option<QueryBuilder<'a, MySql>> {
    let mut ids = ids.into_iter().peekable();
    ids.peek()?;
    let mut q = QueryBuilder::<MySql>::new("SELECT claim_id FROM claims WHERE claim_id IN (");
    let mut list = q.separated(", ");
    for id in ids {
        list.push_bind(id);
    }
    q.push(")");
    Some(q)
}

/// Claim ids of `rows[which]` present in the ledger (optionally only those of `batch_id`).
async fn ids_where(
    tx: &mut Transaction<'_, MySql>,
    rows: &[ClaimRow<'_>],
    which: &[usize],
    batch_id: Option<u64>,
    timeout: Duration,
) -> Result<HashSet<String>, LedgerError> {
    let mut found = HashSet::new();
    for chunk in which.chunks(IDS_PER_QUERY) {
        let Some(mut q) = claim_ids_query(chunk.iter().map(|&i| rows[i].claim_id)) else {
            continue;
        };
        if let Some(b) = batch_id {
            q.push(" AND batch_id = ").push_bind(b);
        }
        let here: Vec<String> = bounded(
            "read claim ids",
            timeout,
            q.build_query_scalar().fetch_all(&mut **tx),
        )
        .await?;
        found.extend(here);
    }
    Ok(found)
}

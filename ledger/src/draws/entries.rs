//! Entries, read from each shard's entries stream and committed with the stream's place,
//! and read back: by home shard (a restore) or in draw order (a verification).

use std::collections::HashSet;
use std::time::Duration;

use sqlx::mysql::MySqlRow;
use sqlx::{MySql, MySqlPool, QueryBuilder, Row, Transaction};

use super::{Entry, CHUNK};
use crate::error::LedgerError;
use crate::places::Place;
use crate::pool::bounded;
use crate::row_buckets::padded_rows;

fn entry_of(r: &MySqlRow) -> Entry {
    Entry {
        user: r.get(0),
        priority: r.get(1),
        entry_id: r.get(2),
        shard: r.get(3),
        entered_ms: r.get(4),
    }
}

/// `user_id` has a binary collation (byte-exact, as in Redis); sqlx decodes only text as
/// `String`. Unaliased, so `ORDER BY user_id` and `user_id > ?` stay on the column.
const ENTRY_COLUMNS: &str = "CAST(user_id AS CHAR), priority, entry_id, shard, entered_ms";

/// Commits a batch read from one shard's entries stream, in one transaction: the entries
/// (`INSERT IGNORE`: a re-read after a failover repeats them) and the stream's place moved
/// from `from` to `to`. False, with nothing written, when the stream is not at `from` any
/// more (another reader moved it): the caller reads again from [`place`]. Entries of a sku
/// without a draw, or with fields too long for their columns, are skipped with a warning
/// (Redis takes neither); entries of a draw recorded already are skipped with an anomaly
/// `draw_entry_after_draw` (they did not take part in it; the ledger's entries stay the
/// list it was drawn from).
pub async fn commit_entries(
    pool: &MySqlPool,
    stream: &str,
    from: &Place,
    to: &Place,
    entries: &[(u64, Entry)],
    t: Duration,
) -> Result<bool, LedgerError> {
    let mut tx = bounded("begin", t, pool.begin()).await?;
    if !advance(&mut tx, stream, from, to, t).await? {
        bounded("rollback", t, tx.rollback()).await?;
        return Ok(false);
    }
    let open = open_draws(&mut tx, stream, entries, t).await?;
    let fits = |e: &Entry| e.user.chars().count() <= 64 && e.entry_id.len() <= 64;
    let rows: Vec<&(u64, Entry)> = entries
        .iter()
        .filter(|(s, e)| open.contains(s) && fits(e))
        .collect();
    if rows.len() < entries.len() {
        tracing::warn!(
            stream,
            skipped = entries.len() - rows.len(),
            "draw entries without an open draw or too long for the ledger skipped"
        );
    }
    insert(&mut tx, &rows, t).await?;
    bounded("commit", t, tx.commit()).await?;
    Ok(true)
}

/// Moves the place of `stream` from `from` to `to`; false when it is not at `from`.
async fn advance(
    tx: &mut Transaction<'_, MySql>,
    stream: &str,
    from: &Place,
    to: &Place,
    t: Duration,
) -> Result<bool, LedgerError> {
    bounded(
        "stream offset row",
        t,
        sqlx::query("INSERT IGNORE INTO stream_offsets (stream) VALUES (?)")
            .bind(stream)
            .execute(&mut **tx),
    )
    .await?;
    let moved = bounded(
        "advance entries offset",
        t,
        sqlx::query(
            "UPDATE stream_offsets SET last_id = ?, repl_id = ? \
             WHERE stream = ? AND last_id = ? AND repl_id = ?",
        )
        .bind(&to.last_id)
        .bind(&to.repl_id)
        .bind(stream)
        .bind(&from.last_id)
        .bind(&from.repl_id)
        .execute(&mut **tx),
    )
    .await?
    .rows_affected();
    // Matched rows (CLIENT_FOUND_ROWS): a move to the same place counts.
    Ok(moved == 1)
}

/// The skus of `entries` whose draw is open, their rows held shared; an anomaly for each
/// one drawn already.
async fn open_draws(
    tx: &mut Transaction<'_, MySql>,
    stream: &str,
    entries: &[(u64, Entry)],
    t: Duration,
) -> Result<HashSet<u64>, LedgerError> {
    let skus: HashSet<u64> = entries.iter().map(|(s, _)| *s).collect();
    let mut open = HashSet::new();
    if skus.is_empty() {
        return Ok(open);
    }
    // Shared: `create` cannot change a draw's terms under entries it has not seen, and
    // `record` (which locks the row for update) cannot draw past them: an entry is in
    // the ledger before the draw's result, or never.
    let mut q =
        QueryBuilder::<MySql>::new("SELECT sku, CAST(state AS CHAR) FROM draws WHERE sku IN (");
    let mut sep = q.separated(", ");
    for s in &skus {
        sep.push_bind(*s);
    }
    q.push(") LOCK IN SHARE MODE");
    let found: Vec<(u64, String)> = bounded(
        "draws of entries",
        t,
        q.build_query_as().fetch_all(&mut **tx),
    )
    .await?;
    for (sku, state) in found {
        if state == "open" {
            open.insert(sku);
            continue;
        }
        // Drawn already (the draw stopped waiting for this reader): the entries did
        // not take part, and the ledger's entries stay the list it was drawn from.
        let late: Vec<&str> = entries
            .iter()
            .filter(|(s, _)| *s == sku)
            .map(|(_, e)| e.entry_id.as_str())
            .collect();
        let first = late.first().copied().unwrap_or_default();
        crate::anomalies::anomaly(
            &mut **tx,
            "draw_entry_after_draw",
            &format!("{stream}/{first}"),
            Some(sku),
            &format!(
                "{} entries of sku {sku} reached the ledger after its draw and are not in it (first {first})",
                late.len()
            ),
            t,
        )
        .await?;
    }
    Ok(open)
}

/// Inserts `rows` (`INSERT IGNORE`: a re-read repeats them), `CHUNK` a statement.
async fn insert(
    tx: &mut Transaction<'_, MySql>,
    rows: &[&(u64, Entry)],
    t: Duration,
) -> Result<(), LedgerError> {
    for chunk in rows.chunks(CHUNK) {
        let mut q = QueryBuilder::<MySql>::new(
            "INSERT IGNORE INTO draw_entries (sku, user_id, priority, entry_id, shard, entered_ms) ",
        );
        // Padded with copies of the last row, which the INSERT IGNORE skips, so the text is
        // one of a few shapes (`row_buckets.rs`).
        let padding = std::iter::repeat_n(
            chunk[chunk.len() - 1],
            padded_rows(chunk.len(), CHUNK) - chunk.len(),
        );
        q.push_values(chunk.iter().copied().chain(padding), |mut b, (sku, e)| {
            b.push_bind(*sku)
                .push_bind(&e.user)
                .push_bind(e.priority)
                .push_bind(&e.entry_id)
                .push_bind(e.shard)
                .push_bind(e.entered_ms);
        });
        bounded("insert draw entries", t, q.build().execute(&mut **tx)).await?;
    }
    Ok(())
}

/// Where the reader of `stream` stands ([`Place::start`] before its first commit).
pub async fn place(pool: &MySqlPool, stream: &str, t: Duration) -> Result<Place, LedgerError> {
    let row: Option<(String, String)> = bounded(
        "stream place",
        t,
        sqlx::query_as("SELECT last_id, repl_id FROM stream_offsets WHERE stream = ?")
            .bind(stream)
            .fetch_optional(pool),
    )
    .await?;
    Ok(row.map_or_else(Place::start, |(last_id, repl_id)| Place {
        last_id,
        repl_id,
    }))
}

/// Entries of home shard `shard`, by user id after `after_user`: restores a shard's
/// entrants into a Redis that lost them.
pub async fn entries_of_shard(
    pool: &MySqlPool,
    sku: u64,
    shard: u16,
    after_user: Option<&str>,
    limit: u32,
    t: Duration,
) -> Result<Vec<Entry>, LedgerError> {
    let sql = format!(
        "SELECT {ENTRY_COLUMNS} FROM draw_entries WHERE sku = ? AND shard = ? {} ORDER BY user_id LIMIT ?",
        if after_user.is_some() { "AND user_id > ?" } else { "" }
    );
    let mut q = sqlx::query(&sql).bind(sku).bind(shard);
    if let Some(u) = after_user {
        q = q.bind(u);
    }
    let rows = bounded("draw entries of shard", t, q.bind(limit).fetch_all(pool)).await?;
    Ok(rows.iter().map(entry_of).collect())
}

/// Every entry in draw order (priority, then user id bytes), after `after`: for verifying a
/// draw from its revealed seed.
pub async fn entries_in_order(
    pool: &MySqlPool,
    sku: u64,
    after: Option<(u64, &str)>,
    limit: u32,
    t: Duration,
) -> Result<Vec<Entry>, LedgerError> {
    let rows = match after {
        None => bounded(
            "draw entries in order",
            t,
            sqlx::query(&format!(
                "SELECT {ENTRY_COLUMNS} FROM draw_entries WHERE sku = ? ORDER BY priority, user_id LIMIT ?"
            ))
            .bind(sku)
            .bind(limit)
            .fetch_all(pool),
        )
        .await?,
        // `priority >= ?` first, so the index is read as a range from the last row on.
        Some((p, u)) => bounded(
            "draw entries in order",
            t,
            sqlx::query(&format!(
                "SELECT {ENTRY_COLUMNS} FROM draw_entries WHERE sku = ? AND priority >= ? \
                 AND (priority > ? OR user_id > ?) ORDER BY priority, user_id LIMIT ?"
            ))
            .bind(sku)
            .bind(p)
            .bind(p)
            .bind(u)
            .bind(limit)
            .fetch_all(pool),
        )
        .await?,
    };
    Ok(rows.iter().map(entry_of).collect())
}

/// Entries of `sku` in the ledger.
pub async fn entry_count(pool: &MySqlPool, sku: u64, t: Duration) -> Result<u64, LedgerError> {
    let n: i64 = bounded(
        "count draw entries",
        t,
        sqlx::query_scalar("SELECT COUNT(*) FROM draw_entries WHERE sku = ?")
            .bind(sku)
            .fetch_one(pool),
    )
    .await?;
    Ok(n as u64)
}

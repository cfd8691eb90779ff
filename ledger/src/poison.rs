//! `stream_poison`: stream entries the consumer passed without a claim row — entries that do
//! not decode into a claim record, and records MySQL refused on their own — kept with their
//! fields, in the transaction that moves the stream's place past them
//! (migrations/0017_stream_offsets.sql). Each is also a critical `poison` anomaly.

use std::time::Duration;

use sqlx::{MySql, MySqlPool, QueryBuilder, Transaction};

use crate::anomalies::anomaly;
use crate::error::LedgerError;
use crate::pool::bounded;

/// The anomaly kind of a poison entry.
pub const ANOMALY: &str = "poison";

/// One entry kept: its stream, id, why, and its fields as JSON (`{"name": "value"}`, bytes
/// that are not UTF-8 replaced).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Poison {
    pub stream: String,
    pub entry_id: String,
    pub reason: String,
    pub fields: String,
}

/// An entry's fields as the JSON object of `stream_poison.fields`, names sorted; bytes
/// that are not UTF-8 replaced.
pub fn fields_json<K: AsRef<str>, V: AsRef<[u8]>>(
    fields: impl IntoIterator<Item = (K, V)>,
) -> String {
    let sorted: std::collections::BTreeMap<String, String> = fields
        .into_iter()
        .map(|(k, v)| {
            let v = String::from_utf8_lossy(v.as_ref()).into_owned();
            (k.as_ref().to_owned(), v)
        })
        .collect();
    serde_json::to_string(&sorted).unwrap_or_default()
}

/// Keeps `entries` inside `tx` (a second copy of one is ignored), each with its anomaly.
pub async fn keep(
    tx: &mut Transaction<'_, MySql>,
    entries: &[Poison],
    t: Duration,
) -> Result<(), LedgerError> {
    if entries.is_empty() {
        return Ok(());
    }
    let mut q: QueryBuilder<MySql> =
        QueryBuilder::new("INSERT IGNORE INTO stream_poison (stream, entry_id, reason, fields) ");
    q.push_values(entries, |mut b, p| {
        b.push_bind(&p.stream)
            .push_bind(&p.entry_id)
            .push_bind(p.reason.chars().take(500).collect::<String>())
            .push_bind(&p.fields);
    });
    bounded("keep poison entries", t, q.build().execute(&mut **tx)).await?;
    for p in entries {
        let reference = format!("{}/{}", p.stream, p.entry_id);
        anomaly(&mut **tx, ANOMALY, &reference, None, &p.reason, t).await?;
    }
    Ok(())
}

/// [`keep`] in a transaction of its own.
pub async fn keep_now(
    pool: &MySqlPool,
    entries: &[Poison],
    t: Duration,
) -> Result<(), LedgerError> {
    if entries.is_empty() {
        return Ok(());
    }
    let mut tx = bounded("begin", t, pool.begin()).await?;
    keep(&mut tx, entries, t).await?;
    bounded("commit", t, tx.commit()).await
}

/// The poison entries kept, oldest first, at most `limit`.
pub async fn list(pool: &MySqlPool, limit: u32, t: Duration) -> Result<Vec<Poison>, LedgerError> {
    bounded(
        "list poison entries",
        t,
        sqlx::query_as(
            "SELECT stream, entry_id, reason, fields FROM stream_poison \
             ORDER BY found_at, stream, entry_id LIMIT ?",
        )
        .bind(limit)
        .fetch_all(pool),
    )
    .await
}

/// How many poison entries are kept.
pub async fn count(pool: &MySqlPool, t: Duration) -> Result<u64, LedgerError> {
    let n: i64 = bounded(
        "count poison entries",
        t,
        sqlx::query_scalar("SELECT COUNT(*) FROM stream_poison").fetch_one(pool),
    )
    .await?;
    Ok(n as u64)
}

/// The poison entry `stream`/`entry_id`, if one is kept.
pub async fn get(
    pool: &MySqlPool,
    stream: &str,
    entry_id: &str,
    t: Duration,
) -> Result<Option<Poison>, LedgerError> {
    bounded(
        "read poison entry",
        t,
        sqlx::query_as(
            "SELECT stream, entry_id, reason, fields FROM stream_poison \
             WHERE stream = ? AND entry_id = ?",
        )
        .bind(stream)
        .bind(entry_id)
        .fetch_optional(pool),
    )
    .await
}

/// Removes `stream`/`entry_id` inside `tx`: false when it is not there (never kept, or
/// replayed by someone else first).
pub async fn remove(
    tx: &mut Transaction<'_, MySql>,
    stream: &str,
    entry_id: &str,
    t: Duration,
) -> Result<bool, LedgerError> {
    let done = bounded(
        "remove poison entry",
        t,
        sqlx::query("DELETE FROM stream_poison WHERE stream = ? AND entry_id = ?")
            .bind(stream)
            .bind(entry_id)
            .execute(&mut **tx),
    )
    .await?;
    Ok(done.rows_affected() == 1)
}

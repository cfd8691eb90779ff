//! `stream_offsets`: where the consumer stands in each claims stream, and who owns it
//! (migrations/0017_stream_offsets.sql). The consumer's side is `consumer/src/shard.rs`.
//!
//! The place moves only inside the transaction that commits the rows read up to it
//! ([`advance`], called by `claims::write_batch`), conditional on the place the read started
//! from and on the lease epoch of the consumer that read it: a batch is applied exactly
//! once by construction, the way a Kafka sink keeps its offsets beside its rows, and a
//! consumer that lost its lease (a pause, a partition) commits nothing. The lease itself
//! only keeps two live consumers from reading the same stream twice for nothing.

use std::time::Duration;

use sqlx::{MySql, MySqlPool, Transaction};

use crate::error::LedgerError;
use crate::pool::bounded;

/// A place in one stream: the newest entry committed, and the replication id of the master
/// it was read under (`""` and `"0-0"` before the first commit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub last_id: String,
    pub repl_id: String,
}

impl Place {
    /// The start of a stream no one has read yet.
    pub fn start() -> Self {
        Self {
            last_id: "0-0".into(),
            repl_id: String::new(),
        }
    }
}

/// A stream's lease, held: the epoch every commit names, and the place it starts from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub stream: String,
    pub epoch: u64,
    pub place: Place,
}

/// One stream's move in a batch: from the place the first read started at to the newest
/// entry read, under `epoch`.
#[derive(Debug, Clone)]
pub struct Advance {
    pub stream: String,
    pub epoch: u64,
    pub from: Place,
    pub to: Place,
}

/// Takes `stream`'s lease for `owner` when it is free, expired (by MySQL's clock), or
/// already `owner`'s, raising the epoch: `None` while another owner holds it.
pub async fn acquire(
    pool: &MySqlPool,
    stream: &str,
    owner: &str,
    lease: Duration,
    t: Duration,
) -> Result<Option<Lease>, LedgerError> {
    bounded(
        "stream_offsets row",
        t,
        sqlx::query("INSERT IGNORE INTO stream_offsets (stream) VALUES (?)")
            .bind(stream)
            .execute(pool),
    )
    .await?;
    let taken = bounded(
        "acquire stream lease",
        t,
        sqlx::query(
            "UPDATE stream_offsets SET owner = ?, epoch = epoch + 1, \
             lease_until = CURRENT_TIMESTAMP(3) + INTERVAL ? MICROSECOND \
             WHERE stream = ? AND (owner IS NULL OR owner = ? \
                OR lease_until IS NULL OR lease_until < CURRENT_TIMESTAMP(3))",
        )
        .bind(owner)
        .bind(lease.as_micros() as u64)
        .bind(stream)
        .bind(owner)
        .execute(pool),
    )
    .await?
    .rows_affected();
    if taken == 0 {
        return Ok(None);
    }
    let (last_id, repl_id, epoch, held_by): (String, String, u64, Option<String>) = bounded(
        "read stream lease",
        t,
        sqlx::query_as(
            "SELECT last_id, repl_id, epoch, owner FROM stream_offsets WHERE stream = ?",
        )
        .bind(stream)
        .fetch_one(pool),
    )
    .await?;
    // Another consumer may have taken it between the two statements (our lease expired at
    // once under a tiny `lease`): then it is theirs.
    if held_by.as_deref() != Some(owner) {
        return Ok(None);
    }
    Ok(Some(Lease {
        stream: stream.to_owned(),
        epoch,
        place: Place { last_id, repl_id },
    }))
}

/// Extends the lease of `epoch`: false when it is no longer `owner`'s under that epoch.
pub async fn renew(
    pool: &MySqlPool,
    stream: &str,
    owner: &str,
    epoch: u64,
    lease: Duration,
    t: Duration,
) -> Result<bool, LedgerError> {
    let n = bounded(
        "renew stream lease",
        t,
        sqlx::query(
            "UPDATE stream_offsets SET lease_until = CURRENT_TIMESTAMP(3) + INTERVAL ? MICROSECOND \
             WHERE stream = ? AND owner = ? AND epoch = ?",
        )
        .bind(lease.as_micros() as u64)
        .bind(stream)
        .bind(owner)
        .bind(epoch)
        .execute(pool),
    )
    .await?
    .rows_affected();
    // sqlx connects with CLIENT_FOUND_ROWS: a matched row counts even when unchanged.
    Ok(n == 1)
}

/// Gives the lease up (a clean stop), so another consumer takes the stream at once.
pub async fn release(
    pool: &MySqlPool,
    stream: &str,
    owner: &str,
    epoch: u64,
    t: Duration,
) -> Result<(), LedgerError> {
    bounded(
        "release stream lease",
        t,
        sqlx::query(
            "UPDATE stream_offsets SET owner = NULL, lease_until = NULL \
             WHERE stream = ? AND owner = ? AND epoch = ?",
        )
        .bind(stream)
        .bind(owner)
        .bind(epoch)
        .execute(pool),
    )
    .await?;
    Ok(())
}

/// Moves one stream's place inside the batch's transaction: false (nothing moved) when the
/// stream is not at `from` under `epoch` any more: another consumer took it over or moved
/// it, and the caller rolls the whole transaction back.
pub async fn advance(
    tx: &mut Transaction<'_, MySql>,
    a: &Advance,
    t: Duration,
) -> Result<bool, LedgerError> {
    let n = bounded(
        "advance stream place",
        t,
        sqlx::query(
            "UPDATE stream_offsets SET last_id = ?, repl_id = ? \
             WHERE stream = ? AND epoch = ? AND last_id = ? AND repl_id = ?",
        )
        .bind(&a.to.last_id)
        .bind(&a.to.repl_id)
        .bind(&a.stream)
        .bind(a.epoch)
        .bind(&a.from.last_id)
        .bind(&a.from.repl_id)
        .execute(&mut **tx),
    )
    .await?
    .rows_affected();
    // Matched rows (CLIENT_FOUND_ROWS), so a move to the same place counts too.
    Ok(n == 1)
}

/// Where `stream` stands, its epoch and owner (operators, tests, the trim).
pub async fn get(
    pool: &MySqlPool,
    stream: &str,
    t: Duration,
) -> Result<Option<(Place, u64, Option<String>)>, LedgerError> {
    let row: Option<(String, String, u64, Option<String>)> = bounded(
        "stream place",
        t,
        sqlx::query_as(
            "SELECT last_id, repl_id, epoch, owner FROM stream_offsets WHERE stream = ?",
        )
        .bind(stream)
        .fetch_optional(pool),
    )
    .await?;
    Ok(row.map(|(last_id, repl_id, epoch, owner)| (Place { last_id, repl_id }, epoch, owner)))
}

/// The place of `stream` inside `tx` (a rebuild reads it under its campaign lock, without a
/// second connection).
pub async fn place_in(
    tx: &mut Transaction<'_, MySql>,
    stream: &str,
    t: Duration,
) -> Result<Option<String>, LedgerError> {
    bounded(
        "stream place",
        t,
        sqlx::query_scalar("SELECT last_id FROM stream_offsets WHERE stream = ?")
            .bind(stream)
            .fetch_optional(&mut **tx),
    )
    .await
}

/// The owners of every lease not run out yet (by MySQL's clock).
pub async fn owners(pool: &MySqlPool, t: Duration) -> Result<Vec<String>, LedgerError> {
    bounded(
        "stream lease owners",
        t,
        sqlx::query_scalar(
            "SELECT DISTINCT owner FROM stream_offsets \
             WHERE owner IS NOT NULL AND lease_until >= CURRENT_TIMESTAMP(3)",
        )
        .fetch_all(pool),
    )
    .await
}

//! Draw campaigns (migrations/0018_draws.sql): a verifiable raffle. Users enter during the
//! entry window; Redis gives each entry a priority from HMAC-SHA1(seed, "<sku>:<user>")
//! (lower wins, ties by user id bytes). At `draw_at_ms` the best `stock + waitlist`
//! entrants get ranks 1..K: ranks 1..stock win (each becomes an ordinary 1-unit claim), the
//! rest are served in rank order as units are released. The seed's SHA-256 is published at
//! creation and the seed revealed after the draw, so anyone can recompute the order from
//! [`entries_in_order`].
//!
//! Entries reach the ledger the way claims do: read from each shard's entries stream and
//! committed with the stream's place in `stream_offsets` ([`commit_entries`]), so a read is
//! committed exactly once.
//!
//! Changes from the first draft of this API: `due` and `live` leave out campaigns whose
//! close-out started; a drawn draw is due while `granted_rank` is below
//! `min(stock + waitlist, ranks recorded)`; `live` returns [`Live`]; `Draw` is not
//! `Serialize` (it carries the secret seed); `Mode::parse` gives an `Option` (`str::parse`
//! gives a `LedgerError`); `commit_entries` keeps its `bool` and logs what it skipped;
//! `record` and `set_granted` answer `NotFound` without a draws row, `record` `Invalid` for
//! ranks that are not 1..=n in order.

use std::collections::HashSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use sqlx::mysql::MySqlRow;
use sqlx::{MySql, MySqlPool, QueryBuilder, Row};

use crate::error::LedgerError;
use crate::places::Place;
use crate::pool::bounded;
use crate::row_buckets::padded_rows;

/// How a campaign sells (`campaigns.mode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// First come, first served: every campaign before draws existed.
    #[default]
    Fcfs,
    Draw,
    /// A waiting room in front of first come, first served (`crate::queues`).
    Queue,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fcfs => "fcfs",
            Self::Draw => "draw",
            Self::Queue => "queue",
        }
    }

    /// `None` for a mode this build does not know.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "fcfs" => Some(Self::Fcfs),
            "draw" => Some(Self::Draw),
            "queue" => Some(Self::Queue),
            _ => None,
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = LedgerError;
    fn from_str(s: &str) -> Result<Self, LedgerError> {
        Self::parse(s).ok_or_else(|| LedgerError::Invalid(format!("unknown campaign mode {s:?}")))
    }
}

/// Where a draw is: taking entries, or drawn (its ranks recorded).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DrawState {
    Open,
    Drawn,
}

/// A `draws` row. Not `Serialize`: `seed` must not leave before the draw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Draw {
    pub sku: u64,
    pub draw_at_ms: i64,
    pub waitlist: u32,
    pub seed: Vec<u8>,
    /// Lowercase hex of SHA-256 of the raw seed bytes: published at creation.
    pub seed_sha256: String,
    pub state: DrawState,
    pub drawn_at_ms: Option<i64>,
    /// Entries the draw was made from.
    pub entrants: Option<u64>,
    /// Ranks 1..=granted_rank have been granted or skipped.
    pub granted_rank: u32,
}

/// One user's entry. `entry_id` is `<shard>-<stream id>`; `shard` the user's home shard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub user: String,
    pub priority: u64,
    pub entry_id: String,
    pub shard: u16,
    pub entered_ms: i64,
}

/// One rank of a draw's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ranked {
    pub rank: u32,
    pub user: String,
    pub priority: u64,
}

/// A draw of a campaign still live, with what the restore loop needs of the campaign.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Live {
    pub draw: Draw,
    pub width: u16,
    pub stock: u64,
}

const DRAW_COLUMNS: &str = "d.sku, d.draw_at_ms, d.waitlist, d.seed, d.seed_sha256, \
     CAST(d.state AS CHAR), d.drawn_at_ms, d.entrants, d.granted_rank";
/// Rows per multi-row INSERT (4 or 6 placeholders each, far below MySQL's 65 535).
const CHUNK: usize = 1000;

fn draw_of(r: &MySqlRow) -> Draw {
    let state: String = r.get(5);
    Draw {
        sku: r.get(0),
        draw_at_ms: r.get(1),
        waitlist: r.get(2),
        seed: r.get(3),
        seed_sha256: r.get(4),
        state: if state == "drawn" {
            DrawState::Drawn
        } else {
            DrawState::Open
        },
        drawn_at_ms: r.get(6),
        entrants: r.get(7),
        granted_rank: r.get(8),
    }
}

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

fn terms_fixed(sku: u64) -> LedgerError {
    LedgerError::Invalid(format!(
        "draw of sku {sku} has entries; its time, waitlist and seed cannot change"
    ))
}

/// What [`create`] would refuse for new terms, read before anything is written (an
/// operator's command stores the campaign first): a drawn draw, or one with entries, keeps
/// its time and waitlist.
pub async fn check_terms(
    pool: &MySqlPool,
    sku: u64,
    draw_at_ms: i64,
    waitlist: u32,
    t: Duration,
) -> Result<(), LedgerError> {
    let Some(d) = get(pool, sku, t).await? else {
        return Ok(());
    };
    if d.draw_at_ms == draw_at_ms && d.waitlist == waitlist {
        return Ok(());
    }
    if d.state == DrawState::Drawn || entry_count(pool, sku, t).await? > 0 {
        return Err(terms_fixed(sku));
    }
    Ok(())
}

/// Makes `sku`'s campaign a draw. Idempotent for the same values; while the draw is open and
/// has no entry its terms may still change (nobody entered under the published hash yet);
/// after that a change is refused. Refused too without a campaign row, or a seed outside
/// 16..=32 bytes (16 is HMAC-SHA1's floor of guessing resistance, 32 the column).
pub async fn create(
    pool: &MySqlPool,
    sku: u64,
    draw_at_ms: i64,
    waitlist: u32,
    seed: &[u8],
    t: Duration,
) -> Result<Draw, LedgerError> {
    if !(16..=32).contains(&seed.len()) {
        return Err(LedgerError::Invalid(format!(
            "draw seed of sku {sku} is {} bytes, must be 16..=32",
            seed.len()
        )));
    }
    let sha = hex::encode(Sha256::digest(seed));
    let mut tx = bounded("begin", t, pool.begin()).await?;
    // The campaign row first, then the draw row, as commit_entries never holds the first.
    let found: Option<u64> = bounded(
        "read campaign",
        t,
        sqlx::query_scalar("SELECT sku FROM campaigns WHERE sku = ? FOR UPDATE")
            .bind(sku)
            .fetch_optional(&mut *tx),
    )
    .await?;
    if found.is_none() {
        return Err(LedgerError::Invalid(format!("no campaign for sku {sku}")));
    }
    let old = bounded(
        "read draw",
        t,
        sqlx::query(&format!(
            "SELECT {DRAW_COLUMNS} FROM draws d WHERE d.sku = ? FOR UPDATE"
        ))
        .bind(sku)
        .fetch_optional(&mut *tx),
    )
    .await?
    .map(|r| draw_of(&r));
    let same = |d: &Draw| d.draw_at_ms == draw_at_ms && d.waitlist == waitlist && d.seed == seed;
    match &old {
        Some(d) if same(d) => {}
        Some(d) => {
            let entered: Option<u64> = bounded(
                "any draw entry",
                t,
                sqlx::query_scalar("SELECT sku FROM draw_entries WHERE sku = ? LIMIT 1")
                    .bind(sku)
                    .fetch_optional(&mut *tx),
            )
            .await?;
            if d.state == DrawState::Drawn || entered.is_some() {
                return Err(terms_fixed(sku));
            }
        }
        None => {}
    }
    bounded(
        "upsert draw",
        t,
        sqlx::query(
            "INSERT INTO draws (sku, draw_at_ms, waitlist, seed, seed_sha256) VALUES (?, ?, ?, ?, ?) \
             ON DUPLICATE KEY UPDATE draw_at_ms = VALUES(draw_at_ms), waitlist = VALUES(waitlist), \
             seed = VALUES(seed), seed_sha256 = VALUES(seed_sha256)",
        )
        .bind(sku)
        .bind(draw_at_ms)
        .bind(waitlist)
        .bind(seed)
        .bind(&sha)
        .execute(&mut *tx),
    )
    .await?;
    bounded(
        "campaign mode",
        t,
        sqlx::query("UPDATE campaigns SET mode = 'draw' WHERE sku = ?")
            .bind(sku)
            .execute(&mut *tx),
    )
    .await?;
    bounded("commit", t, tx.commit()).await?;
    get(pool, sku, t)
        .await?
        .ok_or_else(|| LedgerError::NotFound(format!("draw of sku {sku}")))
}

/// The draw of `sku` (`None`: not a draw campaign).
pub async fn get(pool: &MySqlPool, sku: u64, t: Duration) -> Result<Option<Draw>, LedgerError> {
    let row = bounded(
        "read draw",
        t,
        sqlx::query(&format!(
            "SELECT {DRAW_COLUMNS} FROM draws d WHERE d.sku = ?"
        ))
        .bind(sku)
        .fetch_optional(pool),
    )
    .await?;
    Ok(row.map(|r| draw_of(&r)))
}

/// How `sku` sells (`None`: no campaign). A mode this build does not know is an error.
pub async fn mode(pool: &MySqlPool, sku: u64, t: Duration) -> Result<Option<Mode>, LedgerError> {
    let m: Option<String> = bounded(
        "campaign mode",
        t,
        sqlx::query_scalar("SELECT mode FROM campaigns WHERE sku = ?")
            .bind(sku)
            .fetch_optional(pool),
    )
    .await?;
    m.map(|m| m.parse()).transpose()
}

/// The draw service's work list, for campaigns whose close-out has not started: open draws
/// whose time has come, and drawn ones with ranks left to grant (`granted_rank` below
/// `stock + waitlist` and below the ranks recorded: fewer entrants than that leave nothing
/// past the last rank).
pub async fn due(pool: &MySqlPool, now_ms: i64, t: Duration) -> Result<Vec<Draw>, LedgerError> {
    let rows = bounded(
        "due draws",
        t,
        sqlx::query(&format!(
            "SELECT {DRAW_COLUMNS} FROM draws d JOIN campaigns c ON c.sku = d.sku \
             WHERE c.closing_ms IS NULL AND ((d.state = 'open' AND d.draw_at_ms <= ?) \
               OR (d.state = 'drawn' AND d.granted_rank < c.stock + d.waitlist \
                   AND d.granted_rank < (SELECT COUNT(*) FROM draw_ranks r WHERE r.sku = d.sku))) \
             ORDER BY d.sku"
        ))
        .bind(now_ms)
        .fetch_all(pool),
    )
    .await?;
    Ok(rows.iter().map(draw_of).collect())
}

/// Every draw (any state) of campaigns whose close-out has not started, with the campaign's
/// width and stock: the restore loop's list.
pub async fn live(pool: &MySqlPool, t: Duration) -> Result<Vec<Live>, LedgerError> {
    let rows = bounded(
        "live draws",
        t,
        sqlx::query(&format!(
            "SELECT {DRAW_COLUMNS}, c.width, c.stock FROM draws d JOIN campaigns c ON c.sku = d.sku \
             WHERE c.closing_ms IS NULL ORDER BY d.sku"
        ))
        .fetch_all(pool),
    )
    .await?;
    Ok(rows
        .iter()
        .map(|r| Live {
            draw: draw_of(r),
            width: r.get(9),
            stock: r.get(10),
        })
        .collect())
}

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
    bounded(
        "stream offset row",
        t,
        sqlx::query("INSERT IGNORE INTO stream_offsets (stream) VALUES (?)")
            .bind(stream)
            .execute(&mut *tx),
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
        .execute(&mut *tx),
    )
    .await?
    .rows_affected();
    // Matched rows (CLIENT_FOUND_ROWS): a move to the same place counts.
    if moved != 1 {
        bounded("rollback", t, tx.rollback()).await?;
        return Ok(false);
    }
    let skus: HashSet<u64> = entries.iter().map(|(s, _)| *s).collect();
    let mut open = HashSet::new();
    if !skus.is_empty() {
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
            q.build_query_as().fetch_all(&mut *tx),
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
                &mut *tx,
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
    }
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
        bounded("insert draw entries", t, q.build().execute(&mut *tx)).await?;
    }
    bounded("commit", t, tx.commit()).await?;
    Ok(true)
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

/// Records the draw's result once: false, with nothing written, when it is drawn already
/// (a second drawer lost the race; the first result stands). `ranks` must be 1..=n in order,
/// and computed from the ledger's entries when it held `entrants` of them: `Invalid`, with
/// nothing written, when it holds another count now (entries came in meanwhile; draw
/// again). Entries committed after the result are refused ([`commit_entries`]).
pub async fn record(
    pool: &MySqlPool,
    sku: u64,
    ranks: &[Ranked],
    entrants: u64,
    drawn_at_ms: i64,
    t: Duration,
) -> Result<bool, LedgerError> {
    if let Some((i, r)) = ranks
        .iter()
        .enumerate()
        .find(|(i, r)| r.rank as usize != i + 1)
    {
        return Err(LedgerError::Invalid(format!(
            "draw of sku {sku}: rank {} at position {}",
            r.rank,
            i + 1
        )));
    }
    let mut tx = bounded("begin", t, pool.begin()).await?;
    let state: Option<String> = bounded(
        "lock draw",
        t,
        sqlx::query_scalar("SELECT CAST(state AS CHAR) FROM draws WHERE sku = ? FOR UPDATE")
            .bind(sku)
            .fetch_optional(&mut *tx),
    )
    .await?;
    match state.as_deref() {
        None => return Err(LedgerError::NotFound(format!("draw of sku {sku}"))),
        Some("drawn") => {
            bounded("rollback", t, tx.rollback()).await?;
            return Ok(false);
        }
        Some(_) => {}
    }
    // The draw was computed from `entrants` entries; one committed since (the row lock
    // now keeps any more out) would be in the ledger without having been drawn.
    let now_entered: i64 = bounded(
        "count draw entries",
        t,
        sqlx::query_scalar("SELECT COUNT(*) FROM draw_entries WHERE sku = ?")
            .bind(sku)
            .fetch_one(&mut *tx),
    )
    .await?;
    if now_entered as u64 != entrants {
        bounded("rollback", t, tx.rollback()).await?;
        return Err(LedgerError::Invalid(format!(
            "draw of sku {sku} computed from {entrants} entries; the ledger holds {now_entered} now: draw again"
        )));
    }
    for chunk in ranks.chunks(CHUNK) {
        let mut q =
            QueryBuilder::<MySql>::new("INSERT INTO draw_ranks (sku, rnk, user_id, priority) ");
        q.push_values(chunk, |mut b, r| {
            b.push_bind(sku)
                .push_bind(r.rank)
                .push_bind(&r.user)
                .push_bind(r.priority);
        });
        // Once per draw: not worth a place in the statement cache.
        bounded(
            "insert draw ranks",
            t,
            q.build().persistent(false).execute(&mut *tx),
        )
        .await?;
    }
    bounded(
        "mark drawn",
        t,
        sqlx::query(
            "UPDATE draws SET state = 'drawn', drawn_at_ms = ?, entrants = ? WHERE sku = ?",
        )
        .bind(drawn_at_ms)
        .bind(entrants)
        .bind(sku)
        .execute(&mut *tx),
    )
    .await?;
    bounded("commit", t, tx.commit()).await?;
    Ok(true)
}

/// Ranks after `after_rank`, in order, at most `limit`.
pub async fn ranks(
    pool: &MySqlPool,
    sku: u64,
    after_rank: u32,
    limit: u32,
    t: Duration,
) -> Result<Vec<Ranked>, LedgerError> {
    let rows: Vec<(u32, String, u64)> = bounded(
        "draw ranks",
        t,
        sqlx::query_as(
            "SELECT rnk, CAST(user_id AS CHAR), priority FROM draw_ranks WHERE sku = ? AND rnk > ? ORDER BY rnk LIMIT ?",
        )
        .bind(sku)
        .bind(after_rank)
        .bind(limit)
        .fetch_all(pool),
    )
    .await?;
    Ok(rows
        .into_iter()
        .map(|(rank, user, priority)| Ranked {
            rank,
            user,
            priority,
        })
        .collect())
}

/// `user`'s rank in the draw of `sku` (`None`: not ranked, or not drawn yet).
pub async fn rank_of(
    pool: &MySqlPool,
    sku: u64,
    user: &str,
    t: Duration,
) -> Result<Option<u32>, LedgerError> {
    bounded(
        "draw rank of user",
        t,
        sqlx::query_scalar("SELECT rnk FROM draw_ranks WHERE sku = ? AND user_id = ?")
            .bind(sku)
            .bind(user)
            .fetch_optional(pool),
    )
    .await
}

/// Moves `granted_rank` forward to `rank`, never back (two granters may finish out of order).
pub async fn set_granted(
    pool: &MySqlPool,
    sku: u64,
    rank: u32,
    t: Duration,
) -> Result<(), LedgerError> {
    let n = bounded(
        "draw granted rank",
        t,
        sqlx::query("UPDATE draws SET granted_rank = GREATEST(granted_rank, ?) WHERE sku = ?")
            .bind(rank)
            .bind(sku)
            .execute(pool),
    )
    .await?
    .rows_affected();
    if n == 0 {
        return Err(LedgerError::NotFound(format!("draw of sku {sku}")));
    }
    Ok(())
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

/// How a draw's claims stand in the ledger: the users who hold a grant (a claim under the
/// grant's request id `draw`, any status), and the claims made any other way, which a
/// draw campaign must never have (a sale first come, first served).
pub async fn claims_of_draw(
    pool: &MySqlPool,
    sku: u64,
    grant_request: &str,
    t: Duration,
) -> Result<(Vec<String>, u64), LedgerError> {
    let granted: Vec<String> = bounded(
        "draw grants",
        t,
        sqlx::query_scalar(
            "SELECT CAST(user_id AS CHAR) FROM claims WHERE sku = ? AND request_id = ? \
             ORDER BY user_id",
        )
        .bind(sku)
        .bind(grant_request)
        .fetch_all(pool),
    )
    .await?;
    let other: i64 = bounded(
        "draw other claims",
        t,
        sqlx::query_scalar(
            "SELECT COUNT(*) FROM claims WHERE sku = ? \
             AND (request_id IS NULL OR request_id <> ?)",
        )
        .bind(sku)
        .bind(grant_request)
        .fetch_one(pool),
    )
    .await?;
    Ok((granted, other as u64))
}

/// Records the claim that granted `rank` (on its row), before `granted_rank` moves past it:
/// the win is in the ledger from then on, whether or not the claim's stream record has
/// reached the claims table.
pub async fn record_win(
    pool: &MySqlPool,
    sku: u64,
    rank: u32,
    claim_id: &str,
    claim_shard: u16,
    t: Duration,
) -> Result<(), LedgerError> {
    let n = bounded(
        "draw win",
        t,
        sqlx::query(
            "UPDATE draw_ranks SET claim_id = ?, claim_shard = ? WHERE sku = ? AND rnk = ?",
        )
        .bind(claim_id)
        .bind(claim_shard)
        .bind(sku)
        .bind(rank)
        .execute(pool),
    )
    .await?
    .rows_affected();
    if n == 0 {
        return Err(LedgerError::NotFound(format!(
            "rank {rank} of the draw of sku {sku}"
        )));
    }
    Ok(())
}

/// Every win of a draw: `(user, claim id, shard the unit came from)`, as the draw loop
/// recorded them and as the claims table holds them (grants made before migration 0020
/// are only there), for the marks and the restore (`campaign-ops/src/draw/run.rs`).
pub async fn wins(
    pool: &MySqlPool,
    sku: u64,
    grant_request: &str,
    t: Duration,
) -> Result<Vec<(String, String, u16)>, LedgerError> {
    bounded(
        "draw wins",
        t,
        sqlx::query_as(
            "SELECT CAST(user_id AS CHAR), claim_id, claim_shard FROM draw_ranks              WHERE sku = ? AND claim_id IS NOT NULL              UNION              SELECT CAST(user_id AS CHAR), claim_id, shard FROM claims              WHERE sku = ? AND request_id = ?",
        )
        .bind(sku)
        .bind(sku)
        .bind(grant_request)
        .fetch_all(pool),
    )
    .await
}

/// Every grant of a draw in the claims table: `(user, claim id, shard the unit came
/// from)`.
pub async fn grants(
    pool: &MySqlPool,
    sku: u64,
    grant_request: &str,
    t: Duration,
) -> Result<Vec<(String, String, u16)>, LedgerError> {
    bounded(
        "draw grants with claims",
        t,
        sqlx::query_as(
            "SELECT CAST(user_id AS CHAR), claim_id, shard FROM claims \
             WHERE sku = ? AND request_id = ? ORDER BY user_id",
        )
        .bind(sku)
        .bind(grant_request)
        .fetch_all(pool),
    )
    .await
}

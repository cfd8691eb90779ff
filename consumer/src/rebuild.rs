//! One rebuild path from the ledger: every Redis state of a SKU (slices, per-user counts,
//! user sequences, release sets, replay answers) written back from the MySQL ledger and
//! the claims still in flight. Used by `consumer preheat` when the ledger already holds
//! claims of the SKU, by `consumer rebuild <sku>`, and by the service when a slice of a live
//! campaign is missing (`rebuild/watch.rs`).
//!
//! How it serializes with claims in flight (it never runs blind on a live slice):
//! 1. **Fence** every shard of the SKU (`lua/rebuild_fence.lua`): a token with a lease in
//!    the shard meta, and the slice removed. From that atomic step on, claim.lua, take.lua
//!    and release_stock.lua on the shard answer "not preheated" and change nothing, and
//!    preheat.lua refuses. A claim that ran before the fence left its record in the stream.
//!    All shards are fenced before anything is read, so no second chance can take from a
//!    shard whose records were already read.
//! 2. **Quiesce** a moment, so a consumer that read entries just before a loss (they are
//!    in its memory only) commits them to the ledger first.
//! 3. **Read the streams, then the ledger.** The consumer commits an entry before it
//!    deletes it, so an entry is in at least one of the two reads; claims are merged by
//!    claim id (the ledger's status wins), so each is counted exactly once. Dead letters
//!    are read too: they are acknowledged claims not yet in the ledger.
//! 4. **Write** each shard in one atomic step (`lua/rebuild.lua`), which checks the token
//!    first: a rebuild whose lease was taken over changes nothing and fails. Holds still
//!    standing (a second chance in progress before the fence) count for their user unless
//!    their claim was found. Replay answers are written before, while the fence is up. The
//!    shard's wave hash keeps only the waves the ledger has applied (`wave.rs`): a wave
//!    caught half way is applied again by its retry, since its units are not in the stock
//!    the rebuild read. (A wave whose ledger step commits between that read and the write
//!    leaves its units out of the slices: undersell, which reconciliation reports; never
//!    oversell.)
//!
//! A closed campaign (`closeout.rs`) is never brought back.
//!
//! Two rebuilds at once: the second finds the fence busy and stops (or, once the lease
//! ran out, takes over and the first stops at its write). A crash halfway leaves shards
//! fenced (claims answer "not preheated", nothing oversells) until a rebuild runs again;
//! every step is idempotent, so running it again is the repair.

mod image;
pub mod watch;

use std::collections::HashMap;
use std::time::Duration;

use serde::Serialize;
use shard_router::rebuild::FenceOutcome;
use shard_router::{ClaimRecord, StockClient};
use sqlx::MySqlPool;

use crate::campaign;
use crate::db::bounded;
use crate::error::ConsumerError;
use crate::ledger;
use crate::stream::{self, ShardStream};
use image::{Known, Seen};

/// Entries per XRANGE page.
const PAGE: usize = 1000;

/// How a rebuild runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// How long the fence holds a shard against other rebuilds; a crashed rebuild blocks
    /// the next one this long.
    pub lease: Duration,
    /// Pause between fence and read (see step 2 above).
    pub quiesce: Duration,
    /// Bound on each MySQL statement.
    pub db_timeout: Duration,
}

impl Options {
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
    pub const DEFAULT_QUIESCE: Duration = Duration::from_secs(1);

    pub fn new(db_timeout: Duration) -> Self {
        Self {
            lease: Self::DEFAULT_LEASE,
            quiesce: Self::DEFAULT_QUIESCE,
            db_timeout,
        }
    }
}

/// What one rebuild wrote.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub sku: u64,
    pub stock: u64,
    /// Each shard's slice after the rebuild.
    pub slices: Vec<(u16, i64)>,
    pub active_units: u64,
    pub in_flight_units: u64,
    /// Units taken beyond the stock before the rebuild (recorded as an anomaly).
    pub oversold: u64,
    pub users: usize,
    pub released: usize,
    pub answers: usize,
}

/// Rebuilds every shard of `sku` from the ledger. See the module comment for the steps.
pub async fn rebuild(
    pool: &MySqlPool,
    client: &StockClient,
    sku: u64,
    opts: &Options,
) -> Result<Report, ConsumerError> {
    let t = opts.db_timeout;
    crate::closeout::refuse_if_closed(pool, sku, "rebuild", t).await?;
    let width = campaign::get(pool, sku, t).await?.width;
    let shards = client.placement().shards_of(sku, width);
    let token = token();

    // Look first, so a rebuild in progress is not disturbed by fencing its finished shards.
    let now = shard_router::now_ms();
    for &shard in &shards {
        if let Some((holder, expires_ms)) = client.rebuild_fence(sku, shard).await? {
            if expires_ms > now {
                return Err(busy(sku, shard, &holder, expires_ms));
            }
        }
    }
    for &shard in &shards {
        if let FenceOutcome::Busy { holder, expires_ms } =
            client.fence_rebuild(sku, shard, &token, opts.lease).await?
        {
            return Err(busy(sku, shard, &holder, expires_ms));
        }
    }
    tracing::info!(sku, %token, shards = shards.len(), "rebuild: shards fenced");
    tokio::time::sleep(opts.quiesce).await;
    // Read under the fence: a stock wave (`wave.rs`) cannot touch a fenced slice, so the
    // stock read here and the applied waves below belong together.
    let c = campaign::get(pool, sku, t).await?;
    let meta = c.meta();
    let applied_waves = applied_waves(pool, sku, t).await?;

    let streams: Vec<ShardStream> = shards
        .iter()
        // Only XRANGE is used: every entry counts, whichever group holds it.
        .map(|&s| ShardStream::new(client, s, ""))
        .collect();
    let mut known: HashMap<String, Known> = HashMap::new();
    for r in in_flight(client, &streams, sku).await? {
        known.insert(
            r.claim_id.clone(),
            Known {
                record: r,
                seen: Seen::InFlight,
            },
        );
    }
    for k in ledger_claims(pool, sku, t).await? {
        known.insert(k.record.claim_id.clone(), k);
    }
    let claims: Vec<Known> = known.into_values().collect();

    let mut holds = HashMap::new();
    for &shard in &shards {
        let fields = client
            .holds(sku, shard)
            .await?
            .into_iter()
            .map(|h| format!("{}|{}", h.user, h.user_seq))
            .collect();
        holds.insert(shard, fields);
    }
    let shares: Vec<(u16, u64)> = shards.iter().copied().zip(meta.slices()).collect();
    let request_ttl = client.config().request_ttl.as_millis() as i64;
    let img = image::compute(
        &shares,
        &claims,
        &holds,
        shard_router::now_ms(),
        request_ttl,
    );

    client.store_answers(sku, &img.answers).await?;
    for shard in &img.shards {
        if !client
            .write_rebuild(&meta, &token, shard, &applied_waves)
            .await?
        {
            return Err(ConsumerError::Invalid(format!(
                "sku {sku}: another rebuild took shard {} over (this one's lease ran out); \
                 that one finishes the job",
                shard.shard
            )));
        }
    }
    client.write_sku_meta(&meta).await?;

    let report = Report {
        sku,
        stock: c.stock,
        slices: img.shards.iter().map(|s| (s.shard, s.slice)).collect(),
        active_units: img.active_units,
        in_flight_units: img.in_flight_units,
        oversold: img.oversold,
        users: img.shards.iter().map(|s| s.users.len()).sum(),
        released: img.shards.iter().map(|s| s.released_stock.len()).sum(),
        answers: img.answers.len(),
    };
    let detail = serde_json::to_string(&report).unwrap_or_default();
    if report.oversold > 0 {
        tracing::error!(sku, %detail, "rebuild: more units taken than the stock");
        ledger::anomaly(
            pool,
            "oversold",
            &format!("{sku}:{token}"),
            Some(sku),
            &detail,
            t,
        )
        .await?;
    }
    metrics::counter!(crate::metrics::REBUILDS).increment(1);
    tracing::info!(sku, %detail, "rebuild: Redis written back from the ledger");
    Ok(report)
}

/// True when the ledger holds any claim of `sku`: then a preheat must rebuild, not split
/// the full stock again.
pub async fn ledger_has_claims(
    pool: &MySqlPool,
    sku: u64,
    t: Duration,
) -> Result<bool, ConsumerError> {
    let any: Option<i64> = bounded(
        "any claim",
        t,
        sqlx::query_scalar("SELECT 1 FROM claims WHERE sku = ? LIMIT 1")
            .bind(sku)
            .fetch_optional(pool),
    )
    .await?;
    Ok(any.is_some())
}

fn busy(sku: u64, shard: u16, holder: &str, expires_ms: i64) -> ConsumerError {
    ConsumerError::Invalid(format!(
        "sku {sku}: shard {shard} is being rebuilt by {holder} (lease until {expires_ms} ms); \
         run the rebuild again after that"
    ))
}

/// Stock waves already inside the campaign's stock: the only ids a rebuilt wave hash keeps,
/// so a wave half applied before the rebuild is applied again in full by its retry.
async fn applied_waves(
    pool: &MySqlPool,
    sku: u64,
    t: Duration,
) -> Result<Vec<String>, ConsumerError> {
    bounded(
        "applied waves",
        t,
        sqlx::query_scalar(
            "SELECT wave_id FROM campaign_waves WHERE sku = ? AND applied_ms IS NOT NULL",
        )
        .bind(sku)
        .fetch_all(pool),
    )
    .await
}

/// A token naming this rebuild (host, process, time), unique enough to tell two apart.
fn token() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "host".into());
    let host: String = host.chars().filter(|c| *c != '|').take(32).collect();
    format!("{host}-{}-{}", std::process::id(), shard_router::now_ms())
}

/// Claims of `sku` in the shard streams and their dead letters.
async fn in_flight(
    client: &StockClient,
    streams: &[ShardStream],
    sku: u64,
) -> Result<Vec<ClaimRecord>, ConsumerError> {
    let mut out = Vec::new();
    for s in streams {
        for entry in s.all_entries(client, PAGE).await? {
            if let Ok(d) = stream::decode(s.shard, &entry) {
                if d.record.sku == sku {
                    out.push(d.record);
                }
            }
        }
        let mut dead = s.clone();
        dead.key = s.dead_key.clone();
        for entry in dead.all_entries(client, PAGE).await? {
            // A dead letter carries its original entry id: that is the claim id.
            let original = entry.get::<String>("dead_entry");
            let Some(original) = original else { continue };
            let mut e = entry.clone();
            e.id = original;
            if let Ok(d) = stream::decode(s.shard, &e) {
                if d.record.sku == sku {
                    out.push(d.record);
                }
            }
        }
    }
    Ok(out)
}

type Row = (
    String,
    String,
    u64,
    u32,
    u16,
    u16,
    Option<String>,
    i64,
    String,
);

/// Every ledger claim of `sku` with its standing.
async fn ledger_claims(
    pool: &MySqlPool,
    sku: u64,
    t: Duration,
) -> Result<Vec<Known>, ConsumerError> {
    let rows: Vec<Row> = bounded(
        "rebuild claims",
        t,
        // user_id and request_id have a binary collation; sqlx decodes only text as String.
        sqlx::query_as(
            "SELECT claim_id, CAST(user_id AS CHAR), user_seq, qty, shard, home, \
             CAST(request_id AS CHAR), claimed_ms, CAST(status AS CHAR) FROM claims WHERE sku = ?",
        )
        .bind(sku)
        .fetch_all(pool),
    )
    .await?;
    Ok(rows
        .into_iter()
        .map(
            |(claim_id, user, user_seq, qty, shard, home, rid, ts, status)| Known {
                record: ClaimRecord {
                    claim_id,
                    sku,
                    user,
                    qty,
                    user_seq,
                    shard,
                    home,
                    request_id: rid,
                    ts_ms: ts,
                },
                seen: match status.as_str() {
                    "pending" | "confirmed" => Seen::Active,
                    _ => Seen::Released,
                },
            },
        )
        .collect())
}

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
//!    shard whose records were already read. The lease is renewed while the rebuild runs
//!    (`rebuild/lease.rs`).
//! 2. **Flush** (`rebuild/handshake.rs`, `flush.rs`): entries a consumer read before the
//!    loss are in its memory only, so step 3 cannot see them. The rebuild raises a flush
//!    request and waits, bounded, until every live consumer confirms that what it read
//!    before the request is committed (step 3 then reads it) or dropped; what it reads
//!    after is still in its stream at step 3. The argument, and who is not waited for
//!    (then a fixed pause, and what commits later is a late claim, `consumer/src/late.rs`),
//!    are in `rebuild/handshake.rs`.
//! 3. **Read under the campaign row, in one transaction:** `SELECT … FOR UPDATE` on the
//!    campaign row (every batch takes it shared first, `ledger/src/claims.rs`), then the
//!    streams (this step's statements: `ledger/src/rebuild.rs`); the claims found there are inserted into the ledger (`commit::store`, the batches' own
//!    insert), `campaigns.rebuild_gen` is bumped, and the ledger is read
//!    by pages (waiting late claims included: counted here, marked applied only after
//!    step 5). A batch commits either before that
//!    (its rows are read) or after the commit, and then the records it inserts carry an
//!    older generation: late claims, counted in Redis after their commit
//!    (`consumer/src/late.rs`). The ledger's status wins for a claim found in both.
//! 4. **Write** each shard in one atomic step (`lua/rebuild.lua`) with the new generation
//!    and its debt (units the ledger counts sold beyond the share, `rebuild/image.rs`),
//!    which checks the token first: a rebuild whose lease was taken over changes nothing
//!    and fails. Holds still standing (a second chance in progress before the fence) count
//!    for their user unless their claim was found. Replay answers are written before, while
//!    the fence is up. The shard's wave hash keeps only the waves the ledger has applied
//!    (`wave.rs`; a wave's ledger step takes the campaign row too, so it is wholly before
//!    or after the read, and one after it finds the generation bumped and pushes the wave
//!    to Redis again).
//! 5. **Confirm** every shard written (`replica::write_confirmed`, under `--replica-wait`):
//!    the replication id read before step 1, and a fence after the write acknowledged by
//!    every online replica. Unconfirmed, the rebuild fails (retryable) and nothing in the
//!    ledger says it counted anything. Then the late claims it read, and any that committed
//!    meanwhile, are marked (`late::sweep`: a shard of the newer generation answers
//!    `STALE`, itself confirmed). A failover that rolled the write back leaves the shard
//!    fenced (the watch rebuilds it) or at the claims' own generation (the sweep applies
//!    them there).
//!
//! A closed campaign (`closeout.rs`) is never brought back.
//!
//! Two rebuilds at once: the second finds the fence busy and stops (or, once the lease
//! ran out, takes over and the first stops at its write). A crash halfway leaves shards
//! fenced (claims answer "not preheated", nothing oversells) until a rebuild runs again;
//! every step is idempotent, so running it again is the repair.

pub mod handshake;
mod image;

mod lease;

mod sources;
mod steps;
pub mod watch;

use std::time::Duration;

use serde::Serialize;
use shard_router::StockClient;
use sqlx::MySqlPool;

use crate::OpsError;
pub(crate) use sources::in_flight;
use steps::LedgerRead;

/// Fences after the write before a rebuild gives up on a replica confirming it (each one
/// bounded by the replica wait, a wait apart).
const CONFIRM_ATTEMPTS: u32 = 10;

/// How a rebuild runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// How long the fence holds a shard against other rebuilds; a crashed rebuild blocks
    /// the next one this long. Renewed every third of it while the rebuild runs.
    pub lease: Duration,
    /// Longest wait for the consumers' flush confirmations (step 2 above); zero skips the
    /// handshake.
    pub flush_wait: Duration,
    /// Pause between fence and read when the handshake did not complete (step 2 above).
    pub quiesce: Duration,
    /// Bound on each MySQL statement (also on the wait for the campaign row).
    pub db_timeout: Duration,
    /// Ledger rows per page of the read.
    pub ledger_page: usize,
    /// When the rebuild's own write, and the late claims it counts afterwards, wait for a
    /// replica (`late::apply_with`).
    pub replica_wait: consumer::replica::ReplicaWait,
}

impl Options {
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
    pub const DEFAULT_QUIESCE: Duration = Duration::from_secs(1);
    pub const DEFAULT_FLUSH_WAIT: Duration = Duration::from_secs(5);

    pub fn new(db_timeout: Duration) -> Self {
        Self {
            lease: Self::DEFAULT_LEASE,
            flush_wait: Self::DEFAULT_FLUSH_WAIT,
            quiesce: Self::DEFAULT_QUIESCE,
            db_timeout,
            ledger_page: sources::LEDGER_PAGE,
            replica_wait: Default::default(),
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
    /// Units of active ledger claims the rebuild found (before it added the in-flight ones).
    pub active_units: u64,
    /// Units of claims found only in the streams (inserted by the rebuild).
    pub in_flight_units: u64,
    /// The rebuild generation written to every shard.
    pub gen: u64,
    /// Late claims of earlier rebuilds the ledger read counted (marked applied by the sweep
    /// that follows the write, once a replica holds it).
    pub late_counted: u64,
    /// Units taken beyond the stock before the rebuild (recorded as an anomaly).
    pub oversold: u64,
    pub users: usize,
    pub released: usize,
    pub answers: usize,
    /// The flush handshake (step 2): consumers waited for, and those that did not answer.
    pub flush: handshake::Flush,
}

/// Rebuilds every shard of `sku` from the ledger. See the module comment for the steps.
pub async fn rebuild(
    pool: &MySqlPool,
    client: &StockClient,
    sku: u64,
    opts: &Options,
) -> Result<Report, OpsError> {
    let t = opts.db_timeout;
    ledger::campaigns::refuse_if_closed(pool, sku, "rebuild", t).await?;
    let mut c = ledger::campaigns::get(pool, sku, t).await?;
    let shards = client.placement().shards_of(sku, c.width);
    let token = token();

    let before = steps::fence(client, sku, &shards, &token, opts).await?;
    let _renewal = lease::Renewal::start(
        client.clone(),
        sku,
        shards.clone(),
        token.clone(),
        opts.lease,
    );
    tracing::info!(sku, %token, shards = shards.len(), "rebuild: shards fenced");
    let flush = handshake::flush(pool, sku, opts.flush_wait, t).await?;
    if !flush.complete() {
        tokio::time::sleep(opts.quiesce).await;
    }

    let LedgerRead {
        gen,
        meta,
        applied_waves,
        in_flight_units,
        late_counted,
        claims,
        floors,
        holds,
    } = steps::read_ledger(pool, client, &mut c, &shards, sku, opts, t).await?;

    let img = steps::image_of(client, &shards, &meta, &claims, &holds, &floors);
    client.store_answers(sku, &img.answers).await?;
    steps::write_shards(client, sku, &meta, &token, &img.shards, &applied_waves, gen).await?;
    // A draw's shards first: a gateway that sees the metadata finds the draw open.
    crate::draw::open(pool, client, &c, t).await?;
    client.write_sku_meta(&meta).await?;
    drop(_renewal);
    // Nothing relies on the write before a replica holds it: a failover would bring back
    // the fenced or the previous shard while the ledger took the late claims as counted.
    steps::confirm(client, sku, &before, opts.replica_wait).await?;
    steps::sweep_late(pool, client, sku, t, opts.replica_wait).await?;

    let report = Report {
        sku,
        stock: c.stock,
        slices: img.shards.iter().map(|s| (s.shard, s.slice)).collect(),
        active_units: img.active_units.saturating_sub(in_flight_units),
        in_flight_units,
        gen,
        late_counted,
        oversold: img.oversold,
        users: img.shards.iter().map(|s| s.users.len()).sum(),
        released: img.shards.iter().map(|s| s.released_stock.len()).sum(),
        answers: img.answers.len(),
        flush,
    };
    let detail = serde_json::to_string(&report).unwrap_or_default();
    steps::record_oversold(pool, sku, &token, &report, &detail, t).await?;
    metrics::counter!(crate::metrics::REBUILDS).increment(1);
    tracing::info!(sku, %detail, "rebuild: Redis written back from the ledger");
    Ok(report)
}

/// True when the ledger holds any claim of `sku`, or a rebuild already ran: then a preheat
/// must rebuild, not split the full stock again. (After a rebuild the shard metas carry its
/// generation; a plain split would write metas without it, and every record claimed there
/// would look older than the campaign's generation, i.e. late, while Redis counted it.)
pub async fn ledger_has_claims(pool: &MySqlPool, sku: u64, t: Duration) -> Result<bool, OpsError> {
    Ok(ledger::rebuild::claims_or_rebuilt(pool, sku, t).await?)
}

/// True when the ledger holds any claim of `sku`.
pub async fn any_claim(pool: &MySqlPool, sku: u64, t: Duration) -> Result<bool, OpsError> {
    Ok(ledger::rebuild::any_claim(pool, sku, t).await?)
}

fn busy(sku: u64, shard: u16, holder: &str, expires_ms: i64) -> OpsError {
    OpsError::Invalid(format!(
        "sku {sku}: shard {shard} is being rebuilt by {holder} (lease until {expires_ms} ms); \
         run the rebuild again after that"
    ))
}

/// A token naming this rebuild (host, process, time), unique enough to tell two apart.
fn token() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "host".into());
    let host: String = host.chars().filter(|c| *c != '|').take(32).collect();
    format!("{host}-{}-{}", std::process::id(), shard_router::now_ms())
}

//! The steps of a rebuild (`rebuild.rs`) that read best on their own, in the order it
//! runs them.

use std::collections::HashMap;
use std::time::Duration;

use consumer::replica::{self, ReplicaWait};
use consumer::{commit, late};
use shard_router::codec::EntryId;
use shard_router::rebuild::{FenceOutcome, ShardImage};
use shard_router::stream::ShardStream;
use shard_router::{ReplicationInfo, SkuMeta, StockClient};
use sqlx::{MySql, MySqlPool, Transaction};

use super::image::{self, Images, Known};
use super::sources;
use super::{busy, in_flight, Options, Report, CONFIRM_ATTEMPTS};
use crate::OpsError;
use ledger::campaigns::Campaign;

/// Fences every shard of `sku` for the rebuild holding `token`, unless another rebuild's
/// fence stands; returns each master's replication id read before any write.
pub(super) async fn fence(
    client: &StockClient,
    sku: u64,
    shards: &[u16],
    token: &str,
    opts: &Options,
) -> Result<HashMap<u16, ReplicationInfo>, OpsError> {
    // Look first, so a rebuild in progress is not disturbed by fencing its finished shards.
    let now = shard_router::now_ms();
    for &shard in shards {
        if let Some((holder, expires_ms)) = client.rebuild_fence(sku, shard).await? {
            if expires_ms > now {
                return Err(busy(sku, shard, &holder, expires_ms));
            }
        }
    }
    // Each master's replication id before this rebuild writes anything, so the fence after
    // its write can tell a failover in between (`replica::write_confirmed`).
    let mut before = HashMap::new();
    if opts.replica_wait != ReplicaWait::Off {
        for &shard in shards {
            before.insert(shard, client.replication(shard).await?);
        }
    }
    for &shard in shards {
        if let FenceOutcome::Busy { holder, expires_ms } =
            client.fence_rebuild(sku, shard, token, opts.lease).await?
        {
            return Err(busy(sku, shard, &holder, expires_ms));
        }
    }
    Ok(before)
}

/// Stores the claims found only in the streams of `shards` in `tx`; returns their units.
pub(super) async fn store_in_flight(
    tx: &mut Transaction<'_, MySql>,
    client: &StockClient,
    shards: &[u16],
    sku: u64,
    t: Duration,
) -> Result<u64, OpsError> {
    let streams: Vec<ShardStream> = shards
        .iter()
        // Only XRANGE is used: every entry counts, whichever group holds it.
        .map(|&s| ShardStream::new(client, s))
        .collect();
    let found = in_flight(client, &streams, sku).await?;
    let refs: Vec<&shard_router::ClaimRecord> = found.iter().collect();
    // In the ledger when this commits = counted by this rebuild (`consumer/src/late.rs`).
    let mut in_flight_units = 0;
    // In batch-sized statements: after a consumer outage the streams can be long.
    for chunk in refs.chunks(consumer::config::MAX_BATCH_ROWS) {
        in_flight_units += commit::store(tx, chunk, None, t).await?.inserted_units;
    }
    Ok(in_flight_units)
}

/// Raises `floors` to the consumer's committed place in each stream of `shards`.
pub(super) async fn consumer_floors(
    tx: &mut Transaction<'_, MySql>,
    client: &StockClient,
    shards: &[u16],
    floors: &mut HashMap<u16, EntryId>,
    t: Duration,
) -> Result<(), OpsError> {
    for &shard in shards {
        let key = shard_router::keys::claims_stream(client.placement(), shard);
        let place = ledger::places::place_in(tx, &key, t).await?;
        let at = place.and_then(|id| shard_router::codec::parse_entry_id(&id));
        // "0-0": nothing committed yet, no floor (XADD refuses an id of 0-0).
        if let Some(at) = at.filter(|&at| at > (0, 0)) {
            let f = floors.entry(shard).or_insert(at);
            *f = (*f).max(at);
        }
    }
    Ok(())
}

/// The `user|seq` field and generation of every hold of `sku` on each of `shards`.
pub(super) async fn standing_holds(
    client: &StockClient,
    sku: u64,
    shards: &[u16],
) -> Result<HashMap<u16, Vec<(String, u64)>>, OpsError> {
    let mut holds = HashMap::new();
    for &shard in shards {
        let fields = client
            .holds(sku, shard)
            .await?
            .into_iter()
            .map(|h| (format!("{}|{}", h.user, h.user_seq), h.gen))
            .collect();
        holds.insert(shard, fields);
    }
    Ok(holds)
}

/// Writes each shard's image, unless another rebuild took the shard over.
pub(super) async fn write_shards(
    client: &StockClient,
    sku: u64,
    meta: &SkuMeta,
    token: &str,
    images: &[ShardImage],
    applied_waves: &[String],
    gen: u64,
) -> Result<(), OpsError> {
    for shard in images {
        if !client
            .write_rebuild(meta, token, shard, applied_waves, gen)
            .await?
        {
            return Err(OpsError::Invalid(format!(
                "sku {sku}: another rebuild took shard {} over (this one's lease ran out); \
                 that one finishes the job",
                shard.shard
            )));
        }
    }
    Ok(())
}

/// Fails unless a replica of each shard in `before` holds the rebuild's write.
pub(super) async fn confirm(
    client: &StockClient,
    sku: u64,
    before: &HashMap<u16, ReplicationInfo>,
    replica_wait: ReplicaWait,
) -> Result<(), OpsError> {
    for (&shard, b) in before {
        if !replica::write_confirmed_within(client, shard, replica_wait, b, CONFIRM_ATTEMPTS).await
        {
            return Err(OpsError::Unconfirmed(format!(
                "sku {sku}: the rebuild of shard {shard} is written but no replica holds it \
                 yet; the late claims it counted stay waiting (the sweep marks them once it \
                 is confirmed, or applies them if a failover rolled it back); running the \
                 rebuild (or the preheat) again once the replica is back finishes it"
            )));
        }
    }
    Ok(())
}

/// Records an anomaly when the rebuild found more units taken than the stock.
pub(super) async fn record_oversold(
    pool: &MySqlPool,
    sku: u64,
    token: &str,
    report: &Report,
    detail: &str,
    t: Duration,
) -> Result<(), OpsError> {
    if report.oversold > 0 {
        tracing::error!(sku, %detail, "rebuild: more units taken than the stock");
        ledger::anomalies::anomaly(
            pool,
            "oversold",
            &format!("{sku}:{token}"),
            Some(sku),
            detail,
            t,
        )
        .await?;
    }
    Ok(())
}

/// What the rebuild read in its one ledger transaction, and the holds standing before it
/// committed.
pub(super) struct LedgerRead {
    pub(super) gen: u64,
    pub(super) meta: SkuMeta,
    pub(super) applied_waves: Vec<String>,
    pub(super) in_flight_units: u64,
    pub(super) late_counted: u64,
    pub(super) claims: Vec<Known>,
    pub(super) floors: HashMap<u16, EntryId>,
    pub(super) holds: HashMap<u16, Vec<(String, u64)>>,
}

/// Reads what the images are made of in one transaction that holds the campaign row, the
/// in-flight claims stored and the generation bumped in it; `c` takes the stock read there.
pub(super) async fn read_ledger(
    pool: &MySqlPool,
    client: &StockClient,
    c: &mut Campaign,
    shards: &[u16],
    sku: u64,
    opts: &Options,
    t: Duration,
) -> Result<LedgerRead, OpsError> {
    // Read before the transaction, which keeps to its one connection (a draw does not
    // change under a rebuild: its mode and seed are fixed at creation).
    let mode = crate::sku::meta_of(pool, c, t).await?;
    let mut tx = ledger::rebuild::begin(pool, t).await?;
    // Batches of this SKU wait from here to the commit (they take the row shared first).
    // Everything below is read in this transaction, so the rebuild needs no second
    // connection while batches wait on the row with theirs.
    let locked = ledger::rebuild::lock_campaign(&mut tx, sku, t).await?;
    let (gen, stock) = (locked.rebuild_gen + 1, locked.stock);
    // A stock wave takes the campaign row too, so the stock read here and the applied
    // waves below belong together.
    c.stock = stock;
    let meta = shard_router::SkuMeta {
        mode: mode.mode,
        ..crate::sku::meta(c)
    };
    // The only wave ids a rebuilt wave hash keeps, so a wave half applied before the
    // rebuild is applied again in full by its retry.
    let applied_waves = ledger::rebuild::applied_waves(&mut tx, sku, t).await?;

    let in_flight_units = store_in_flight(&mut tx, client, shards, sku, t).await?;
    ledger::rebuild::bump_gen(&mut tx, sku, gen, t).await?;
    let late_counted = ledger::late::waiting(&mut tx, sku, t).await?;
    let claims: Vec<Known> =
        sources::ledger_claims(&mut tx, sku, opts.ledger_page.max(1), t).await?;
    let mut floors = sources::stream_floors(&mut tx, shards, t).await?;
    // The consumer's committed place too: it passes poison entries, which are no claims, so
    // the claims' top can sit below it; a new master handing out ids at or below the place
    // would be read only through the new-master rule (`consumer/src/shard.rs`).
    consumer_floors(&mut tx, client, shards, &mut floors, t).await?;

    let holds = standing_holds(client, sku, shards).await?;
    ledger::rebuild::commit(tx, t).await?;
    Ok(LedgerRead {
        gen,
        meta,
        applied_waves,
        in_flight_units,
        late_counted,
        claims,
        floors,
        holds,
    })
}

/// Each shard's image from the ledger's claims and the standing holds, with its stream's
/// floor.
pub(super) fn image_of(
    client: &StockClient,
    shards: &[u16],
    meta: &SkuMeta,
    claims: &[Known],
    holds: &HashMap<u16, Vec<(String, u64)>>,
    floors: &HashMap<u16, EntryId>,
) -> Images {
    let shares: Vec<(u16, u64)> = shards.iter().copied().zip(meta.slices()).collect();
    let request_ttl = client.config().request_ttl.as_millis() as i64;
    let mut img = image::compute(&shares, claims, holds, shard_router::now_ms(), request_ttl);

    // A stream is its shard's, shared by every SKU placed there: the floor is read over all
    // of them, this SKU's found in-flight claims included (stored above).
    for sh in &mut img.shards {
        sh.stream_floor = floors.get(&sh.shard).copied();
    }
    img
}

/// Counts the late claims waiting for this rebuild's generation.
pub(super) async fn sweep_late(
    pool: &MySqlPool,
    client: &StockClient,
    sku: u64,
    t: Duration,
    replica_wait: ReplicaWait,
) -> Result<(), OpsError> {
    // Late claims that committed between this rebuild's commit and its write waited for
    // the shards to carry this generation; count them now rather than at the next sweep.
    let waiting = late::sweep_with(pool, client, Some(sku), t, replica_wait).await?;
    if waiting > 0 {
        tracing::warn!(
            sku,
            waiting,
            "rebuild: late claims still waiting for their shards"
        );
    }
    Ok(())
}

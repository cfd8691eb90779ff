//! The draw itself, one pass per tick over the draws that are due:
//!
//! 1. **Close** every shard (`draw_close.lua`: no entry lands after it) and read its top-K.
//! 2. **Settle**: wait until, on every shard, the entries reader's place has passed the
//!    entries stream's last id read after the close, under the same master, and the
//!    ledger holds as many entries as the shards accepted, so the draw is made from every
//!    acknowledged entry (bounded by `SETTLE`; past it the draw goes on from what the
//!    ledger has, with an anomaly). Counts alone are not enough: a shard that lost entries
//!    the ledger holds (a failover to a replica behind) while others wait to be committed
//!    has as many as the ledger.
//! 3. **Draw** from the ledger, the truth: its best `stock + waitlist` entries by priority
//!    (`draw_entries`' index). The shards' merged top-K must be the same list; a
//!    difference (an entry Redis lost, or one the ledger never got) is an anomaly.
//!    Recorded once (`ledger::draws::record`), with the seed now public.
//! 4. **Mark** each shard's ranks (`draw_mark.lua`) and reveal the seed in the SKU
//!    metadata.
//! 5. **Grant** in rank order: each rank's user gets an ordinary one-unit claim under the
//!    request id `draw` (so a retry, a crash between the claim and the ledger, a second
//!    consumer, all replay it). The first rank the stock cannot cover stops the pass: the
//!    waitlist waits for units a release or a wave brings back, in draw order. A grant
//!    counts (its win recorded, `W|`, the rank granted) only once a replica of the shard
//!    that took the unit holds its claim, under `--replica-wait` like the consumer's
//!    commits ([`granted_on_a_replica`]); unconfirmed, the pass stops and the next one
//!    replays the claim (or, on a promoted replica that lost it, claims afresh).

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use ledger::campaigns::Campaign;
use ledger::draws::{self, Draw, Ranked};
use shard_router::draw::{draw_order, DrawState, MarkBatch};
use shard_router::protocol::{self, Acked, ClaimOptions, LocalEmptyShards};
use shard_router::{
    keys, Claim, ClaimOutcome, ClaimRecord, ClaimRequest, ReplicationInfo, ShardId, StockClient,
    StockError, GRANT_REQUEST,
};
use sqlx::MySqlPool;
use tokio::sync::watch;

use crate::OpsError;
use consumer::replica::{self, ReplicaWait};

/// How long the draw waits for the ledger to hold every entry the shards accepted.
const SETTLE: Duration = Duration::from_secs(30);
/// Ranks marked per script call, and read per page.
const PAGE: u32 = 500;

/// A draw this service is closing: since when it waits, and per shard the entries
/// stream's last id after the close, with the replication id it was read under.
#[derive(Debug, Clone)]
pub struct Closing {
    pub since: Instant,
    targets: HashMap<ShardId, (String, String)>,
}

impl Closing {
    pub fn new(since: Instant) -> Self {
        Self {
            since,
            targets: HashMap::new(),
        }
    }
}

/// A stream id `ms-seq` as numbers (ordered as Redis orders them).
fn stream_id(id: &str) -> Option<(u64, u64)> {
    let (ms, seq) = id.split_once('-')?;
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

/// Runs the draws as they fall due, until shutdown; grants wait for replicas under
/// `replica_wait` (the consumer's `--replica-wait`).
pub async fn run(
    pool: MySqlPool,
    client: StockClient,
    replica_wait: ReplicaWait,
    t: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut closing: HashMap<u64, Closing> = HashMap::new();
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = plumbing::shutdown::stopped(&mut shutdown) => break,
        }
        // The draw time by Redis's clock, the one every process shares.
        let now = match crate::clock::redis_now(&client).await {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, "draw: no clock from redis; skipped");
                continue;
            }
        };
        let due = match draws::due(&pool, now, t).await {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(error = %e, "draw: list due draws failed");
                continue;
            }
        };
        let due_skus: Vec<u64> = due.iter().map(|d| d.sku).collect();
        for d in due {
            if let Err(e) = step(&pool, &client, &d, now, &mut closing, replica_wait, t).await {
                tracing::warn!(sku = d.sku, error = %e, "draw step failed");
            }
        }
        // Every drawn draw's marks, also once nothing is left to grant: a crash between
        // two shards' marks, or a failover that rolled a shard back to before its close
        // or its mark, must not leave its entrants without their standing (both found by
        // the draw model, model/src/draw).
        if let Ok(live) = draws::live(&pool, t).await {
            for l in live {
                if l.draw.state != draws::DrawState::Drawn || due_skus.contains(&l.draw.sku) {
                    continue;
                }
                let marked = match ledger::campaigns::get(&pool, l.draw.sku, t).await {
                    Ok(c) => mark(&pool, &client, &c, t).await,
                    Err(e) => Err(e.into()),
                };
                if let Err(e) = marked {
                    tracing::warn!(sku = l.draw.sku, error = %e, "draw marks failed");
                }
            }
        }
    }
}

/// One pass over one due draw.
pub async fn step(
    pool: &MySqlPool,
    client: &StockClient,
    d: &Draw,
    now_ms: i64,
    closing: &mut HashMap<u64, Closing>,
    replica_wait: ReplicaWait,
    t: Duration,
) -> Result<(), OpsError> {
    let c = ledger::campaigns::get(pool, d.sku, t).await?;
    if d.state == draws::DrawState::Open {
        let cl = closing
            .entry(d.sku)
            .or_insert_with(|| Closing::new(Instant::now()));
        if !close_and_draw(pool, client, &c, d, now_ms, cl, t).await? {
            return Ok(());
        }
        closing.remove(&d.sku);
    }
    mark(pool, client, &c, t).await?;
    grant(pool, client, &c, now_ms, replica_wait, t).await
}

/// Steps 1 to 3; `false` while the draw waits (a shard to restore, entries to commit).
async fn close_and_draw(
    pool: &MySqlPool,
    client: &StockClient,
    c: &Campaign,
    d: &Draw,
    now_ms: i64,
    cl: &mut Closing,
    t: Duration,
) -> Result<bool, OpsError> {
    let k = c.stock + u64::from(d.waitlist);
    let mut accepted = 0;
    let mut merged = Vec::new();
    let mut unread = Vec::new();
    for shard in client.placement().shards_of(c.sku, c.width) {
        let Some(closed) = client.draw_close(shard, c.sku).await? else {
            // Lost on this shard: the restore puts it back first.
            return Ok(false);
        };
        accepted += closed.entrants;
        merged.extend(closed.top);
        // Read after the close: no entry of this draw lands on the shard past it. Kept
        // while the master is the same, so entries of other draws do not move it on.
        let (last, info) = client.entries_last(shard).await?;
        let target = match cl.targets.get(&shard) {
            Some((repl, id)) if *repl == info.replid => id.clone(),
            _ => {
                cl.targets
                    .insert(shard, (info.replid.clone(), last.clone()));
                last
            }
        };
        let place = draws::place(pool, &client.entries_stream(shard).key, t).await?;
        let read = info.is_master
            && place.repl_id == info.replid
            && matches!(
                (stream_id(&place.last_id), stream_id(&target)),
                (Some(p), Some(t)) if p >= t
            );
        if !read {
            unread.push(shard);
        }
    }
    let committed = draws::entry_count(pool, c.sku, t).await?;
    if committed < accepted || !unread.is_empty() {
        if cl.since.elapsed() < SETTLE {
            return Ok(false);
        }
        anomaly(
            pool,
            c.sku,
            "draw_unsettled",
            &format!(
                "the shards accepted {accepted} entries, the ledger held {committed} after {}s \
                 (entries of shards {unread:?} not read up to their close); drawn from the ledger",
                SETTLE.as_secs()
            ),
            t,
        )
        .await?;
    }
    // Counted before the ranks are read: `record` refuses the result if the ledger holds
    // another count by then (an entry committed meanwhile was not drawn from).
    let total = draws::entry_count(pool, c.sku, t).await?;
    let best =
        draws::entries_in_order(pool, c.sku, None, k.min(u64::from(u32::MAX)) as u32, t).await?;
    merged.sort_by(draw_order);
    merged.truncate(k as usize);
    let from_ledger: Vec<(String, u64)> =
        best.iter().map(|e| (e.user.clone(), e.priority)).collect();
    if merged != from_ledger {
        let first = merged.iter().zip(&from_ledger).position(|(a, b)| a != b);
        anomaly(
            pool,
            c.sku,
            "draw_topk_mismatch",
            &format!(
                "the shards' top-K ({} entries) and the ledger's ({}) differ (first at index {first:?}); drawn from the ledger",
                merged.len(),
                from_ledger.len()
            ),
            t,
        )
        .await?;
    }
    let ranks: Vec<Ranked> = best
        .into_iter()
        .enumerate()
        .map(|(i, e)| Ranked {
            rank: i as u32 + 1,
            user: e.user,
            priority: e.priority,
        })
        .collect();
    if draws::record(pool, c.sku, &ranks, total, now_ms, t).await? {
        metrics::counter!("flashgate_draws_total").increment(1);
        tracing::info!(sku = c.sku, entrants = total, ranked = ranks.len(), "drawn");
    }
    Ok(true)
}

/// Step 4 on every shard not marked yet, and the seed revealed.
async fn mark(
    pool: &MySqlPool,
    client: &StockClient,
    c: &Campaign,
    t: Duration,
) -> Result<(), OpsError> {
    let mut any = false;
    for shard in client.placement().shards_of(c.sku, c.width) {
        // Missing (lost): the restore opens it, puts the entries back and marks it.
        match client.draw_state(shard, c.sku).await? {
            Some(DrawState::Closed) => {}
            // Open after the draw: a failover rolled it back past its close. Closed first,
            // so no entry lands after the ranks are marked.
            Some(DrawState::Open) => {
                client.draw_close(shard, c.sku).await?;
            }
            Some(DrawState::Drawn | DrawState::Over) | None => continue,
        }
        mark_shard(pool, client, c, shard, None, t).await?;
        any = true;
    }
    // Also when every shard is marked but the metadata still hides the seed: a pass that
    // died between its last mark and this write left it so. Metadata that is missing is
    // the rebuild's to write (from the ledger, with the seed).
    let unrevealed = client
        .sku_meta(c.sku)
        .await?
        .is_some_and(|m| m.mode.draw().is_some_and(|d| d.seed.is_none()));
    if any || unrevealed {
        let meta = crate::sku::meta_of(pool, c, t).await?;
        client.write_sku_meta(&meta).await?;
    }
    Ok(())
}

/// Writes the wins and the ranks of the users whose home is `shard`, then its state
/// `drawn`. `held`: the restore's token, on a shard it holds, which gives the state itself
/// (a held shard refuses the draw loop's marks: `lua/draw_mark.lua`); then the number of
/// mark batches written under it, or `None` when the shard is not held under it any more.
pub async fn mark_shard(
    pool: &MySqlPool,
    client: &StockClient,
    c: &Campaign,
    shard: ShardId,
    held: Option<u64>,
    t: Duration,
) -> Result<Option<u32>, OpsError> {
    // The wins first: the marks never overwrite one, and a winner asking between the two
    // is told `won`, not `won_pending` (the grant's stored answer may be gone). Here and
    // not only in the restore: a restore that read the draw still open, then saw it drawn
    // and granted and the shard lost again, opens it with no wins, and this is the mark
    // that follows (found by the draw model, `two_losses_leave_no_winner_pending`).
    for (user, claim_id, from) in draws::wins(pool, c.sku, GRANT_REQUEST, t).await? {
        if client.placement().home_shard(c.sku, c.width, &user) == shard {
            client
                .draw_won(c.sku, c.width, &user, &claim_id, from)
                .await?;
        }
    }
    let mut mine: Vec<(String, u32)> = Vec::new();
    let mut after = 0;
    loop {
        let page = draws::ranks(pool, c.sku, after, PAGE, t).await?;
        let Some(last) = page.last() else { break };
        after = last.rank;
        let full = page.len() == PAGE as usize;
        mine.extend(
            page.into_iter()
                .filter(|r| client.placement().home_shard(c.sku, c.width, &r.user) == shard)
                .map(|r| (r.user, r.rank)),
        );
        if !full {
            break;
        }
    }
    let mut chunks = mine.chunks(PAGE as usize).peekable();
    if chunks.peek().is_none() && held.is_none() {
        client.draw_mark(shard, c.sku, &[], MarkBatch::Last).await?;
    }
    let mut written = 0;
    while let Some(chunk) = chunks.next() {
        let batch = match (held, chunks.peek()) {
            (Some(token), _) => MarkBatch::Held(token),
            (None, None) => MarkBatch::Last,
            (None, Some(_)) => MarkBatch::More,
        };
        let marked = client.draw_mark(shard, c.sku, chunk, batch).await?;
        if held.is_some() && !marked {
            return Ok(None);
        }
        written += 1;
    }
    Ok(Some(written))
}

/// Step 5: claims for the ranks not granted yet, in order, while the stock covers them
/// and a replica confirms each (see [`granted_on_a_replica`]).
async fn grant(
    pool: &MySqlPool,
    client: &StockClient,
    c: &Campaign,
    now_ms: i64,
    replica_wait: ReplicaWait,
    t: Duration,
) -> Result<(), OpsError> {
    let Some(d) = draws::get(pool, c.sku, t).await? else {
        return Ok(());
    };
    let meta = crate::sku::meta(c);
    let empties = LocalEmptyShards::default();
    let ranks = draws::ranks(pool, c.sku, d.granted_rank, PAGE, t).await?;
    // Each shard's master as it is before any claim of this pass: a grant is confirmed by
    // a fence under the same replication id only (a failover between the claim and the
    // fence leaves a master without the claim, whose fence would confirm nothing of it).
    let mut before: HashMap<ShardId, ReplicationInfo> = HashMap::new();
    if !ranks.is_empty() && replica_wait != ReplicaWait::Off {
        for shard in client.placement().shards_of(c.sku, c.width) {
            before.insert(shard, client.replication(shard).await?);
        }
    }
    let mut by_shard: BTreeMap<u16, u32> = BTreeMap::new();
    for r in ranks {
        let req = ClaimRequest {
            sku: c.sku,
            user: r.user.clone(),
            qty: 1,
            request_id: Some(GRANT_REQUEST.to_owned()),
        };
        let claimed =
            protocol::claim(client, &meta, &req, ClaimOptions::new(&empties, now_ms)).await;
        let Acked {
            outcome,
            confirmation,
        } = match claimed {
            Ok(o) => o,
            // A Redis the ledger has not vouched for yet (restarted, or a promoted
            // replica): the watch rebuilds and vouches for it; the next pass grants.
            Err(e @ StockError::Restoring { .. }) => {
                tracing::info!(sku = c.sku, rank = r.rank, error = %e, "draw: grant waits for the shard's restore");
                break;
            }
            Err(e) => return Err(e.into()),
        };
        let (claim, replayed) = match outcome {
            ClaimOutcome::Claimed { claim, .. } => (claim, false),
            ClaimOutcome::Replay(claim) => (claim, true),
            ClaimOutcome::LimitReached { held } => {
                // Only grants claim in a draw, one per user: a user already holding the
                // limit got their unit some other way. Passed over, for an operator.
                anomaly(
                    pool,
                    c.sku,
                    "draw_grant_limit",
                    &format!("rank {} ({}) already holds {held}", r.rank, r.user),
                    t,
                )
                .await?;
                draws::set_granted(pool, c.sku, r.rank, t).await?;
                continue;
            }
            // Sold out: the waitlist waits for units to come back. The rest: later.
            _ => break,
        };
        if !confirmation.acknowledgeable()
            || !granted_on_a_replica(
                pool,
                client,
                c,
                &r.user,
                &claim,
                replayed,
                &before,
                replica_wait,
                t,
            )
            .await?
        {
            // Taken, not on a replica yet: nothing recorded, the next pass replays it (a
            // promoted replica that lost it claims afresh under the same request id).
            tracing::info!(sku = c.sku, rank = r.rank, claim = %claim.claim_id, "draw: grant not on a replica yet; the next pass replays it");
            break;
        }
        // The win in the ledger before Redis and before the rank counts as granted: the
        // claims table has it only once the consumer commits the stream record, and a
        // shard that loses its `W|` before that is marked from here.
        draws::record_win(pool, c.sku, r.rank, &claim.claim_id, claim.shard, t).await?;
        client
            .draw_won(c.sku, c.width, &r.user, &claim.claim_id, claim.shard)
            .await?;
        draws::set_granted(pool, c.sku, r.rank, t).await?;
        *by_shard.entry(claim.shard).or_default() += 1;
    }
    let granted: u32 = by_shard.values().sum();
    if granted > 0 {
        metrics::counter!("flashgate_draw_grants_total").increment(u64::from(granted));
        tracing::info!(sku = c.sku, granted, "draw: units granted");
    }
    Ok(())
}

/// Whether a replica holds the grant `claim` of `user`, so that a failover cannot take it
/// back: a fence on the shard that took the unit, after the claim, under the master
/// `before` described (read before this pass claimed anything), confirms everything that
/// master wrote (`consumer::replica::write_confirmed`, under `replica_wait`).
///
/// A replayed grant whose unit came from another shard than the user's home (a reroute of
/// an earlier pass) may have lost its record in a failover of that shard while the home
/// kept the answer: it counts only when its record is in that shard's stream (read before
/// the fence) or already in the ledger. A replay on the home shard needs no such check:
/// the answer and the record were written by one script.
#[allow(clippy::too_many_arguments)]
async fn granted_on_a_replica(
    pool: &MySqlPool,
    client: &StockClient,
    c: &Campaign,
    user: &str,
    claim: &Claim,
    replayed: bool,
    before: &HashMap<ShardId, ReplicationInfo>,
    replica_wait: ReplicaWait,
    t: Duration,
) -> Result<bool, OpsError> {
    if replica_wait == ReplicaWait::Off {
        return Ok(true);
    }
    let Some(info) = before.get(&claim.shard) else {
        // Not a shard of the SKU: nothing to confirm it under.
        return Ok(false);
    };
    if !replica::write_needs_replica(replica_wait, info) {
        return Ok(true);
    }
    let home = client.placement().home_shard(c.sku, c.width, user);
    if replayed && claim.shard != home && !committed(pool, c, claim, t).await? {
        match record_fenced(client, c, user, claim, info, replica_wait).await? {
            // Read and fenced in one pipeline on the master `before` described.
            Some(fence) if fence.confirms(info) => return Ok(true),
            Some(_) => {}
            None => {
                tracing::warn!(sku = c.sku, user, claim = %claim.claim_id, "draw: a replayed grant's record is neither in its shard's stream nor in the ledger");
                return Ok(false);
            }
        }
    }
    Ok(replica::write_confirmed(client, claim.shard, replica_wait, info).await)
}

/// Whether the claims table holds `claim` (committed, its entry maybe trimmed since).
async fn committed(
    pool: &MySqlPool,
    c: &Campaign,
    claim: &Claim,
    t: Duration,
) -> Result<bool, OpsError> {
    let grants = draws::grants(pool, c.sku, GRANT_REQUEST, t).await?;
    Ok(grants.iter().any(|(_, id, _)| *id == claim.claim_id))
}

/// `claim`'s record (this user's, under the grant's request id) read from its shard's
/// stream with a fence behind it in one pipeline; `None` when the stream has no such
/// record.
async fn record_fenced(
    client: &StockClient,
    c: &Campaign,
    user: &str,
    claim: &Claim,
    before: &ReplicationInfo,
    replica_wait: ReplicaWait,
) -> Result<Option<shard_router::Fence>, OpsError> {
    let prefix = format!("{}-", claim.shard);
    let Some(entry) = claim.claim_id.strip_prefix(&prefix) else {
        return Ok(None);
    };
    let mut xrange = redis::cmd("XRANGE");
    xrange
        .arg(keys::claims_stream(client.placement(), claim.shard))
        .arg(entry)
        .arg(entry);
    let wait = replica_wait.bound().unwrap_or_default();
    type Entries = Vec<(String, Vec<(String, Vec<u8>)>)>;
    let (entries, fence) = client
        .read_fenced::<Entries>(claim.shard, xrange, before.replicas_to_wait(), wait)
        .await?;
    let held = entries.iter().any(|(id, fields)| {
        let pairs = fields.iter().map(|(k, v)| (k.as_str(), v.as_slice()));
        ClaimRecord::decode(id, pairs).is_ok_and(|rec| {
            rec.sku == c.sku && rec.user == user && rec.request_id.as_deref() == Some(GRANT_REQUEST)
        })
    });
    Ok(held.then_some(fence))
}

async fn anomaly(
    pool: &MySqlPool,
    sku: u64,
    kind: &str,
    detail: &str,
    t: Duration,
) -> Result<(), OpsError> {
    tracing::warn!(sku, kind, detail, "draw anomaly");
    Ok(ledger::anomalies::anomaly(pool, kind, &sku.to_string(), Some(sku), detail, t).await?)
}

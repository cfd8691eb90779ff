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
//!    commits (`granted_on_a_replica`, in `grant.rs`); unconfirmed, the pass stops and
//!    the next one replays the claim (or, on a promoted replica that lost it, claims
//!    afresh). Marks live in `mark.rs`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use ledger::campaigns::Campaign;
use ledger::draws::{self, Draw, Ranked};
use shard_router::draw::draw_order;
use shard_router::{ShardId, StockClient};
use sqlx::MySqlPool;
use tokio::sync::watch;

use super::grant::grant;
use super::mark::mark;
pub use super::mark::mark_shard;
use crate::OpsError;
use consumer::replica::ReplicaWait;

/// How long the draw waits for the ledger to hold every entry the shards accepted.
const SETTLE: Duration = Duration::from_secs(30);
/// Ranks marked per script call, and read per page.
pub(super) const PAGE: u32 = 500;

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
        if !read_past_close(pool, client, shard, cl, t).await? {
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
    check_top_k(pool, c.sku, &merged, &best, t).await?;
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

/// Whether the entries reader's place on `shard` has passed the entries stream's last id
/// read after the close, under the same master.
async fn read_past_close(
    pool: &MySqlPool,
    client: &StockClient,
    shard: ShardId,
    cl: &mut Closing,
    t: Duration,
) -> Result<bool, OpsError> {
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
    Ok(read)
}

/// An anomaly when the shards' merged top-K is not the ledger's `best`.
async fn check_top_k(
    pool: &MySqlPool,
    sku: u64,
    merged: &[(String, u64)],
    best: &[draws::Entry],
    t: Duration,
) -> Result<(), OpsError> {
    let from_ledger: Vec<(String, u64)> =
        best.iter().map(|e| (e.user.clone(), e.priority)).collect();
    if merged != from_ledger {
        let first = merged.iter().zip(&from_ledger).position(|(a, b)| a != b);
        anomaly(
            pool,
            sku,
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
    Ok(())
}

/// Records a draw anomaly for an operator, and logs it.
pub(super) async fn anomaly(
    pool: &MySqlPool,
    sku: u64,
    kind: &str,
    detail: &str,
    t: Duration,
) -> Result<(), OpsError> {
    tracing::warn!(sku, kind, detail, "draw anomaly");
    Ok(ledger::anomalies::anomaly(pool, kind, &sku.to_string(), Some(sku), detail, t).await?)
}

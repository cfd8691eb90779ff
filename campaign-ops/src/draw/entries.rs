//! Each shard's entries stream into the ledger (`draw_entries`), the place kept in
//! `stream_offsets` beside the rows (`ledger::draws::commit_entries`), as the claims
//! consumer keeps its place (docs/DESIGN.md "The consumer keeps its place in the ledger").
//!
//! Simpler than the claims consumer, because an entry's row is keyed by `(sku, user)`:
//! committing one twice changes nothing, so no lease is needed. Two consumers may read the
//! same entries; the place moves only from where a read started (a compare-and-set), so
//! the slower one's commit is refused and it reads again from the new place. The new-master
//! rule is the claims consumer's: a read under a replication id other than the place's
//! reads the stream again from its start. The trim is the claims stream's guarded trim
//! (`lua/stream_trim.lua`), to the committed place under the same master only.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use ledger::draws::{self, Entry};
use ledger::places::Place;
use shard_router::{ShardId, StockClient};
use sqlx::MySqlPool;
use tokio::sync::watch;

use crate::OpsError;

/// Entries read per shard per round.
const BATCH: usize = 1000;
/// How often a shard's committed entries are trimmed at most.
const TRIM_EVERY: Duration = Duration::from_secs(1);

/// Reads every shard's entries into the ledger while any draw is live; idles otherwise.
pub async fn run(
    pool: MySqlPool,
    client: StockClient,
    t: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut trimmed: HashMap<ShardId, Instant> = HashMap::new();
    let mut live_checked: Option<(Instant, bool)> = None;
    loop {
        let live = match live_checked {
            Some((at, live)) if at.elapsed() < Duration::from_secs(2) => live,
            _ => {
                let live = draws::live(&pool, t).await.is_ok_and(|l| !l.is_empty());
                live_checked = Some((Instant::now(), live));
                live
            }
        };
        let mut more = false;
        if live {
            for shard in 0..client.placement().shard_count() {
                match round(&pool, &client, shard, &mut trimmed, t).await {
                    Ok(full) => more |= full,
                    Err(e) => tracing::warn!(shard, error = %e, "draw entries: read failed"),
                }
            }
        }
        let pause = if more {
            Duration::ZERO
        } else {
            Duration::from_millis(if live { 100 } else { 1000 })
        };
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = plumbing::shutdown::stopped(&mut shutdown) => break,
        }
    }
}

/// One read and commit on `shard`; `true` when the read was full (more may wait).
pub async fn round(
    pool: &MySqlPool,
    client: &StockClient,
    shard: ShardId,
    trimmed: &mut HashMap<ShardId, Instant>,
    t: Duration,
) -> Result<bool, OpsError> {
    let stream = client.entries_stream(shard);
    let place = draws::place(pool, &stream.key, t).await?;
    let (read, info) = client.read_entries(shard, &place.last_id, BATCH).await?;
    if !info.is_master {
        return Ok(false);
    }
    let new_master = !place.repl_id.is_empty() && place.repl_id != info.replid;
    if new_master {
        // Another history: what this master holds at or below the place may not be in
        // the ledger. Read it again from its start; the rows ignore what they have. The
        // new place is where that read ended, "0-0" when it found nothing: the old place
        // means nothing on this master, whose ids may be below it (its clock behind, an
        // old snapshot), and kept it would skip and then trim every later entry.
        let (again, _) = client.read_entries(shard, "0-0", BATCH).await?;
        return commit(
            pool,
            &stream.key,
            &place,
            "0-0",
            again,
            &info.replid,
            shard,
            t,
        )
        .await;
    }
    let full = read.len() == BATCH;
    if read.is_empty() && place.repl_id == info.replid {
        let due = trimmed
            .get(&shard)
            .is_none_or(|at| at.elapsed() >= TRIM_EVERY);
        if due && place.last_id != "0-0" {
            stream
                .trim_committed(client, &place.last_id, &place.repl_id)
                .await?;
            trimmed.insert(shard, Instant::now());
        }
        return Ok(false);
    }
    commit(
        pool,
        &stream.key,
        &place,
        &place.last_id,
        read,
        &info.replid,
        shard,
        t,
    )
    .await?;
    Ok(full)
}

/// Commits `read`, the entries after `base` on `shard`, moving the place from `from`.
#[allow(clippy::too_many_arguments)]
async fn commit(
    pool: &MySqlPool,
    stream: &str,
    from: &Place,
    base: &str,
    read: Vec<Result<shard_router::draw::EntryRecord, shard_router::draw::BadEntry>>,
    repl_id: &str,
    shard: ShardId,
    t: Duration,
) -> Result<bool, OpsError> {
    let full = read.len() == BATCH;
    let mut last = base.to_owned();
    let mut rows = Vec::with_capacity(read.len());
    for e in read {
        match e {
            Ok(e) => {
                last = e.stream_id.clone();
                rows.push((
                    e.sku,
                    Entry {
                        entry_id: format!("{shard}-{}", e.stream_id),
                        user: e.user,
                        priority: e.priority,
                        shard,
                        entered_ms: e.ts_ms,
                    },
                ));
            }
            Err((id, reason)) => {
                // Only draw_enter.lua writes here: an entry that does not decode is kept
                // as an anomaly and passed, as the claims consumer passes poison.
                ledger::anomalies::anomaly(
                    pool,
                    "draw_entry_poison",
                    &format!("{stream}/{id}"),
                    None,
                    &reason,
                    t,
                )
                .await?;
                last = id;
            }
        }
    }
    let to = Place {
        last_id: last,
        repl_id: repl_id.to_owned(),
    };
    if to == *from {
        return Ok(false);
    }
    if !draws::commit_entries(pool, stream, from, &to, &rows, t).await? {
        // Another consumer moved the place: the next round reads from there.
        return Ok(true);
    }
    metrics::counter!("flashgate_draw_entries_committed_total").increment(rows.len() as u64);
    Ok(full)
}

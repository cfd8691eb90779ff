//! The rebuild's half of the flush handshake (step 2 of `rebuild.rs`; the consumer's half
//! is `flush.rs`; the statements on their tables are `ledger/src/consumers.rs`): after the
//! fence, raise a flush request and wait, bounded, until every consumer with a recent
//! heartbeat has committed what it read before seeing it.
//!
//! Why it is enough: a consumer that read entries before the loss holds them in memory
//! only; Redis forgot them, so the rebuild's read (step 3 of `rebuild.rs`) cannot see them.
//! The rebuild raises a flush request N in MySQL and waits, up to `Options::flush_wait`,
//! until every consumer whose heartbeat is recent confirms it: it confirms request N once
//! everything it read from any stream before it saw N is committed to the ledger (so
//! step 3 reads it), or dropped without a commit (a read batch whose master changed
//! before a replica confirmed it, or whose place was refused, `consumer/src/shard.rs`,
//! `writer.rs`: never in the ledger by this consumer, so never late from it; it
//! is read again from the new master if that has it, else lost as without a rebuild,
//! and its units went with the master that lost it). Entries a consumer reads after
//! seeing N were read after the fence, so after the loss: they are still in their
//! stream when step 3 reads it, because nothing removes an entry before its record is
//! committed (`lua/claim.lua` and `lua/take.lua` add without MAXLEN; the only removal is
//! `lua/stream_trim.lua`'s XTRIM to a place the ledger committed, under a guard against
//! a master whose history went back). A batch committing those races step 3 on
//! the campaign row: before it, its rows are read; after it, its entries were in the
//! stream and the rebuild inserted them, so the batch finds them there. So when every
//! live consumer confirms, no claim the rebuild misses can commit after it, and no
//! fixed pause is taken. (A read blocked in XREAD when N is seen counts as read
//! before it until its block ends: the answer takes about `read_block` while the fence
//! keeps the streams idle.) A consumer that does not confirm within the bound (dead,
//! partitioned, stuck) is logged, counted in
//! `flashgate_consumer_rebuild_flush_unanswered_total` and named in the rebuild's `Report`;
//! so, without a wait, is a consumer whose heartbeat went stale within the last minute
//! (it may be alive with a stalled beat) and a stream lease owner with no row (its row
//! lost or gone stale; below). The
//! rebuild then pauses `Options::quiesce` as before the handshake (also when no
//! consumer is registered) and goes on: what such a consumer commits
//! later is a late claim (`consumer/src/late.rs`), recorded, not prevented. Also outside
//! the handshake: records read from a master the shard has already left (a consumer
//! still reading a partitioned old master after a failover).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use serde::Serialize;
use sqlx::MySqlPool;

use crate::OpsError;

/// How often the rebuild looks at the consumers' answers.
const POLL: Duration = Duration::from_millis(20);
/// Rows of consumers gone silent this long are deleted by the next rebuild.
const FORGET_AFTER: Duration = Duration::from_secs(24 * 3600);
/// A consumer whose beat is older than [`consumer::HEARTBEAT_STALE_AFTER`] is not waited for,
/// but until its beat is this old it may be alive with a stalled heartbeat (one beat may
/// wait `db_timeout`, 5 s, on MySQL) and hold what it read before the loss: it is named as
/// unanswered, so the rebuild keeps its pause. A consumer that crashed costs that pause
/// for this long; one stopped cleanly deleted its row.
const MAYBE_ALIVE: Duration = Duration::from_secs(60);

/// What the handshake found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Flush {
    /// The request raised (0: no handshake, `Options::flush_wait` is zero).
    pub request: u64,
    /// Consumers with a recent heartbeat when it was raised: the ones waited for.
    pub consumers: usize,
    /// Of those, the names of the ones that did not answer within the bound (dead,
    /// partitioned, stuck); with them, not waited for, a consumer whose heartbeat went
    /// stale within [`MAYBE_ALIVE`] without answering, and one seen reading a claims
    /// stream with no row: what they commit
    /// later goes through `consumer/src/late.rs`.
    pub unanswered: Vec<String>,
    pub waited_ms: u64,
}

impl Flush {
    /// True when every consumer taking part answered (and there was one).
    pub fn complete(&self) -> bool {
        self.request > 0 && self.consumers > 0 && self.unanswered.is_empty()
    }
}

/// Raises a flush request and waits up to `wait` for every live consumer's answer. A
/// consumer whose row disappears meanwhile stopped cleanly: its writer drained first.
/// Then looks for stream readers that cannot answer.
pub(crate) async fn flush(
    pool: &MySqlPool,
    sku: u64,
    wait: Duration,
    t: Duration,
) -> Result<Flush, OpsError> {
    if wait.is_zero() {
        return Ok(Flush::default());
    }
    let started = Instant::now();
    let request = ledger::consumers::raise_flush_request(pool, t).await?;
    let live = ledger::consumers::live(pool, consumer::HEARTBEAT_STALE_AFTER, t).await?;
    let consumers = live.len();
    let mut waiting: HashMap<String, String> = live
        .into_iter()
        .filter(|(_, _, flushed)| *flushed < request)
        .map(|(instance, name, _)| (instance, name))
        .collect();
    tracing::info!(
        sku,
        request,
        consumers,
        waiting = waiting.len(),
        "rebuild: flush requested"
    );
    let deadline = started + wait;
    while !waiting.is_empty() && Instant::now() < deadline {
        tokio::time::sleep(POLL.min(deadline.saturating_duration_since(Instant::now()))).await;
        let rows: HashMap<String, u64> = ledger::consumers::answers(pool, t)
            .await?
            .into_iter()
            .collect();
        waiting.retain(|instance, _| rows.get(instance).is_some_and(|&f| f < request));
    }
    let mut unanswered: BTreeSet<String> = waiting.into_values().collect();
    // Rows not waited for that may still hold reads from before the request: a heartbeat
    // stale when it was raised (or fresh again since) that has not answered it.
    let recent = ledger::consumers::recent(pool, MAYBE_ALIVE, t).await?;
    unanswered.extend(
        recent
            .iter()
            .filter(|(_, flushed)| *flushed < request)
            .map(|(name, _)| name.clone()),
    );
    let registered: HashSet<String> = recent.into_iter().map(|(name, _)| name).collect();
    unanswered.extend(unregistered_readers(pool, &registered, t).await);
    let unanswered: Vec<String> = unanswered.into_iter().collect();
    let waited_ms = started.elapsed().as_millis() as u64;
    if !unanswered.is_empty() {
        metrics::counter!(crate::metrics::REBUILD_FLUSH_UNANSWERED)
            .increment(unanswered.len() as u64);
        tracing::warn!(sku, request, ?unanswered, ?wait, "rebuild: consumers did not confirm the flush; proceeding (their later commits are late claims)");
    }
    forget_silent(pool, t).await;
    Ok(Flush {
        request,
        consumers,
        unanswered,
        waited_ms,
    })
}

/// Deletes the rows of consumers silent for [`FORGET_AFTER`], by primary key: a DELETE
/// ranging over `beat_at` (no index) would lock every row it scans and hold up the
/// heartbeats of live consumers while it waits.
async fn forget_silent(pool: &MySqlPool, t: Duration) {
    let silent = match ledger::consumers::silent(pool, FORGET_AFTER, t).await {
        Ok(v) => v,
        Err(e) => {
            tracing::debug!(error = %e, "silent consumers not listed");
            return;
        }
    };
    for instance in silent {
        let _ = ledger::consumers::forget(pool, &instance, FORGET_AFTER, t).await;
    }
}

/// Stream lease owners (`ledger/src/places.rs`) with no heartbeat row: a consumer whose
/// row was lost or went stale while it still holds a lease. It may hold reads from before the loss that it commits later: named, so the
/// rebuild keeps its pause. A lease that runs out names nobody.
async fn unregistered_readers(
    pool: &MySqlPool,
    registered: &HashSet<String>,
    t: Duration,
) -> BTreeSet<String> {
    match ledger::places::owners(pool, t).await {
        Ok(owners) => owners
            .into_iter()
            // The row keeps the first 128 characters of the name (`flush.rs`).
            .filter(|n| !registered.contains(&n.chars().take(128).collect::<String>()))
            .collect(),
        Err(e) => {
            // Unknown readers may hold claims: no complete handshake on a guess.
            tracing::warn!(error = %e, "rebuild: stream lease owners not listed");
            BTreeSet::from(["(stream lease owners unknown)".to_owned()])
        }
    }
}

//! One shard's stream, read from the place the ledger keeps (`ledger/src/places.rs`):
//! take the shard's lease, read after the committed place with XREAD (no consumer group,
//! nothing written to Redis), wait for the replicas (`replica.rs`), and hand each read to
//! the writer with the place it started from and the place after it. The writer commits
//! the rows and the new place in one transaction, conditional on the old one
//! (`writer.rs`): a read is committed exactly once, or not at all.
//!
//! **A new master.** The place carries the replication id of the master it was read under.
//! A read under another id (a failover promoted a replica; a master restarted, with or
//! without its data: Redis takes a new replication id at every start) reads the stream
//! again from its start, and every entry goes to the ledger again, the ones it has ignored
//! by claim id. The new master may not hold what the old one had past the place, and may
//! hand out ids at or below it (a loss, then a clock behind the old master's): reading on
//! from the place would skip those for good. Committed entries are trimmed
//! (`stream_trim.lua`), so the stream read again is short.
//!
//! **The lease.** One consumer owns a shard at a time; [`renew_lease`] renews the lease every
//! third of its length, and a renewal that finds it taken (or the writer finding the place
//! moved under it) stops the reads: the shard is acquired again, from the ledger's place.
//! A consumer that stops renewing (dead, partitioned) hands the shard over when its lease
//! runs out; one that stops cleanly releases it at once (`streams.rs`).

use std::time::Duration;

use ledger::places::{self, Place};
use shard_router::stream::{Delivered, Poison, ShardStream};
use shard_router::{ReplicationInfo, ShardId, StockClient};
use sqlx::MySqlPool;
use tokio::sync::{mpsc, watch};

use crate::backoff::Backoff;
use crate::config::Config;
use crate::inflight::{InFlight, Reading};
use crate::lease::{renew_lease, ShardLease};
use crate::metrics as m;
use crate::replica::{Replicated, ShardReplica};

/// Shortest time from one read of a shard to the next, unless a read comes back full (or
/// `batch_max_wait` is shorter). Without it a reader under load asks again as soon as its
/// entries are handed on and gets the 3–4 that arrived meanwhile; each read costs Redis a
/// call and an `INFO` whatever it returns (`campaign-ops/tests/it/redis_cost.rs`). An entry
/// waits at most this long in Redis before it is read; the writer holds a batch open for
/// `batch_max_wait` anyway. An idle shard still answers its first entry at once: the read
/// blocks in Redis and returns as soon as one arrives.
pub(crate) const READ_LINGER: Duration = Duration::from_millis(20);

/// How often the lag gauges are refreshed and idle streams trimmed.
const GAUGES_EVERY: Duration = Duration::from_secs(5);

/// One read of a shard, on its way to the writer.
#[derive(Debug)]
pub struct Read {
    pub shard: ShardId,
    /// The lease epoch it was read under.
    pub epoch: u64,
    /// The place the read started from (the previous read's `to`), and the place after it.
    pub from: Place,
    pub to: Place,
    pub entries: Vec<Delivered>,
    /// Entries that are not claim records: kept in the ledger, passed by the place.
    pub poison: Vec<Poison>,
}

/// What a shard's reader needs.
pub(crate) struct ShardReader {
    pub cfg: Config,
    /// Control-plane client: the replica fence, the lag gauges.
    pub client: StockClient,
    /// The reader's own connection: its XREAD blocks.
    pub reader: StockClient,
    pub pool: MySqlPool,
    pub stream: ShardStream,
    pub replica: ShardReplica,
    pub inflight: InFlight,
    pub lease: ShardLease,
}

impl ShardReader {
    /// Reads the shard until `shutdown`, acquiring its lease first and again whenever it is
    /// lost; returns dropping its sender, so the writer drains. On shutdown the lease's
    /// renewer goes on renewing until the returned stop is sent or dropped: the writer may
    /// still commit this shard's reads, under this lease (`streams.rs` stops it after).
    pub(crate) async fn run(
        self,
        tx: mpsc::Sender<Read>,
        mut shutdown: watch::Receiver<bool>,
    ) -> Option<watch::Sender<bool>> {
        let mut backoff = Backoff::new(self.cfg.backoff_min, self.cfg.backoff_max);
        while !*shutdown.borrow() {
            let Some(lease) = self.acquire(&mut backoff, &mut shutdown).await else {
                break;
            };
            tracing::info!(shard = self.lease.shard, epoch = lease.epoch, at = %lease.place.last_id, "shard lease acquired");
            self.lease.hold(lease.epoch, &lease.place);
            // Renewed from now on: making answers final may take a while on a long stream.
            let (stop_renewer, renewer_stopped) = watch::channel(false);
            let renewer = tokio::spawn(renew_lease(
                self.pool.clone(),
                self.cfg.clone(),
                self.lease.clone(),
                lease.epoch,
                renewer_stopped,
            ));
            self.finalize_committed(&lease.place).await;
            self.lease.committed(&lease.place);
            let go_on = self
                .read_lease(lease, &tx, &mut backoff, &mut shutdown)
                .await;
            if !go_on {
                tracing::debug!(shard = self.lease.shard, "reader stopped");
                if self.lease.lost() {
                    // Not a shutdown: the writer is gone; let the lease run out.
                    let _ = stop_renewer.send(true);
                    return None;
                }
                return Some(stop_renewer);
            }
            let _ = stop_renewer.send(true);
            let _ = renewer.await;
        }
        tracing::debug!(shard = self.lease.shard, "reader stopped");
        None
    }

    /// Takes the lease, retrying while another consumer holds it or MySQL fails. `None`:
    /// shutdown came first.
    async fn acquire(
        &self,
        backoff: &mut Backoff,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Option<places::Lease> {
        loop {
            match places::acquire(
                &self.pool,
                &self.lease.stream,
                &self.cfg.consumer_name,
                self.cfg.lease,
                self.cfg.db_timeout,
            )
            .await
            {
                Ok(Some(l)) => {
                    backoff.reset();
                    return Some(l);
                }
                // Another consumer owns it: look again well within its lease.
                Ok(None) => {
                    let wait = self.cfg.lease / 3;
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = crate::signal::stopped(shutdown) => return None,
                    }
                }
                Err(e) => {
                    tracing::warn!(shard = self.lease.shard, error = %e, "shard lease not acquired; retrying");
                    if !backoff.sleep(shutdown).await {
                        return None;
                    }
                }
            }
        }
    }

    /// Makes final the rerouted answers of the entries still in the stream at or below the
    /// committed place: the consumer that committed them may have died before it did (its
    /// place moved with the commit, so nobody reads them again), and a replay of such a
    /// request would answer 503 until the answer expires. Idempotent (`settle.lua` final).
    /// Only on the master the place was read under (the same replication id before and
    /// after the look): on another one, entries at or below the place may not be committed.
    async fn finalize_committed(&self, at: &Place) {
        if at.repl_id.is_empty() {
            return;
        }
        let shard = self.lease.shard;
        let under = |c: &StockClient| {
            let c = c.clone();
            async move { c.replication(shard).await.map(|i| i.replid).ok() }
        };
        if under(&self.client).await.as_deref() != Some(at.repl_id.as_str()) {
            return;
        }
        // Page by page up to the place, never past it (the backlog after it may be long).
        let mut after: Option<String> = None;
        loop {
            let Ok(page) = self
                .stream
                .page_through(&self.client, after.as_deref(), &at.last_id, 500)
                .await
            else {
                return;
            };
            // Each page read on the master the place was read under, or nothing is final.
            if under(&self.client).await.as_deref() != Some(at.repl_id.as_str()) {
                return;
            }
            let committed: Vec<_> = page
                .iter()
                .filter_map(|e| shard_router::stream::decode(shard, e).ok())
                .map(|d| d.record)
                .collect();
            crate::final_answers::finalize_records(&self.client, committed.iter()).await;
            self.fence_committed(&committed).await;
            match page.last() {
                Some(last) if page.len() == 500 => after = Some(last.id.clone()),
                _ => return,
            }
        }
    }

    /// The consumer that committed these may have died before it fenced a shard their
    /// commit showed going back in time (`commit::fence_gone_back`): read them back from the
    /// ledger and fence again. A shard already rebuilt since is fenced and rebuilt once more.
    async fn fence_committed(&self, committed: &[shard_router::ClaimRecord]) {
        let refs: Vec<_> = committed.iter().collect();
        match crate::commit::committed_before(&self.pool, &refs, self.cfg.db_timeout).await {
            Ok(outcome) => crate::commit::fence_gone_back(&self.client, &outcome).await,
            Err(e) => {
                tracing::warn!(shard = self.lease.shard, error = %e, "committed entries not checked for a shard gone back in time")
            }
        }
    }

    /// Reads under one lease until it is lost (true: acquire again) or shutdown (false).
    async fn read_lease(
        &self,
        lease: places::Lease,
        tx: &mpsc::Sender<Read>,
        backoff: &mut Backoff,
        shutdown: &mut watch::Receiver<bool>,
    ) -> bool {
        let mut cur = Cursor {
            at: lease.place,
            from_start: false,
        };
        loop {
            match self
                .step(lease.epoch, &mut cur, tx, backoff, shutdown)
                .await
            {
                Next::Read => {}
                Next::Stop(again) => return again,
            }
        }
    }

    /// One read of the lease, handed to the writer; says what to do next.
    async fn step(
        &self,
        epoch: u64,
        cur: &mut Cursor,
        tx: &mpsc::Sender<Read>,
        backoff: &mut Backoff,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Next {
        let shard = self.lease.shard;
        if *shutdown.borrow() {
            return Next::Stop(false);
        }
        if self.lease.lost() {
            tracing::warn!(shard, epoch, "shard lease lost; acquiring it again");
            return Next::Stop(true);
        }
        let after = if cur.from_start {
            "0-0"
        } else {
            cur.at.last_id.as_str()
        };
        let (reading, entries, under) = match self.read(after, backoff, shutdown).await {
            Ok(r) => r,
            Err(next) => return next,
        };
        let asked = reading.asked;
        // Asked on every read, empty ones too, so a replica seen once is remembered
        // before the first entry needs it (see `replica.rs`).
        let must_wait = self.replica.required(&under);
        if !cur.from_start && !cur.at.repl_id.is_empty() && under.replid != cur.at.repl_id {
            metrics::counter!(m::NEW_MASTER_REREADS).increment(1);
            tracing::warn!(shard, was = %cur.at.repl_id, now = %under.replid, at = %cur.at.last_id, "new master: reading the stream again from its start");
            cur.from_start = true;
            return Next::Read;
        }
        if entries.is_empty() {
            return Next::Read;
        }
        let read_len = entries.len();
        let (good, poison, last) = sort_entries(shard, entries);
        let to = Place {
            last_id: last.unwrap_or_else(|| after.to_owned()),
            repl_id: under.replid.clone(),
        };
        self.inflight
            .add(shard, good.iter().map(|d| d.entry_id.as_str()), &reading);
        drop(reading);
        if must_wait {
            if let Some(next) = self.confirm(&under, &good, backoff, shutdown).await {
                return next;
            }
        }
        let read = Read {
            shard,
            epoch,
            from: cur.at.clone(),
            to: to.clone(),
            entries: good,
            poison,
        };
        if !self.hand_over(tx, read).await {
            return Next::Stop(false);
        }
        cur.at = to;
        cur.from_start = false;
        // A read that was not full took what had arrived: let the next one gather.
        if read_len < self.cfg.read_count {
            let linger = READ_LINGER.min(self.cfg.batch_max_wait);
            let until = tokio::time::Instant::from_std(asked + linger);
            tokio::select! {
                _ = tokio::time::sleep_until(until) => {}
                _ = crate::signal::stopped(shutdown) => return Next::Stop(false),
            }
        }
        Next::Read
    }

    /// Reads the stream after `after`, marked in flight (see [`InFlight::begin`]); a read
    /// that fails is backed off from, and `Err` says what to do next.
    async fn read(
        &self,
        after: &str,
        backoff: &mut Backoff,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<(Reading, Vec<Result<Delivered, Poison>>, ReplicationInfo), Next> {
        let shard = self.lease.shard;
        // Registered before the read is sent and kept until its entries are in flight,
        // so a flush cut taken meanwhile waits for them (`inflight.rs`, `flush.rs`).
        let reading = self.inflight.begin();
        let read = self
            .stream
            .read_after_under(
                &self.reader,
                after,
                self.cfg.read_count,
                self.cfg.read_block,
            )
            .await;
        match read {
            Ok((entries, under)) => {
                backoff.reset();
                Ok((reading, entries, under))
            }
            Err(e) => {
                drop(reading);
                tracing::warn!(shard, error = %e, "xread failed; backing off");
                if !backoff.sleep(shutdown).await {
                    return Err(Next::Stop(false));
                }
                Err(Next::Read)
            }
        }
    }

    /// Waits for a replica to hold the read (`replica.rs`); `Some`: it is not handed on,
    /// its entries are no longer in flight, and this says what to do next.
    async fn confirm(
        &self,
        under: &ReplicationInfo,
        good: &[Delivered],
        backoff: &mut Backoff,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Option<Next> {
        let shard = self.lease.shard;
        match self
            .replica
            .confirm(&self.client, under, backoff, shutdown)
            .await
        {
            Replicated::Yes => {
                backoff.reset();
                None
            }
            Replicated::MasterChanged => {
                // Not committed; the place stays, and the next read, under the new
                // master's id, starts from the beginning.
                self.inflight
                    .remove(shard, good.iter().map(|d| d.entry_id.as_str()));
                Some(Next::Read)
            }
            Replicated::Shutdown => {
                self.inflight
                    .remove(shard, good.iter().map(|d| d.entry_id.as_str()));
                Some(Next::Stop(false))
            }
        }
    }

    /// Hands a read to the writer; `false`: the writer is gone.
    async fn hand_over(&self, tx: &mpsc::Sender<Read>, read: Read) -> bool {
        let shard = self.lease.shard;
        if let Err(gone) = tx.send(read).await {
            // The writer loop is gone (it only ends once every reader stopped, so it
            // died): nothing will commit this shard's reads. Their marks go, and so
            // does the lease (`run`), or no other consumer could take the shard.
            let r = gone.0;
            self.inflight
                .remove(shard, r.entries.iter().map(|d| d.entry_id.as_str()));
            self.lease.lose(r.epoch);
            return false;
        }
        true
    }
}

/// A lease's entries as read: the claim records, the poison (kept in the ledger), and the
/// id of the last of either.
fn sort_entries(
    shard: ShardId,
    entries: Vec<Result<Delivered, Poison>>,
) -> (Vec<Delivered>, Vec<Poison>, Option<String>) {
    let mut good = Vec::with_capacity(entries.len());
    let mut poison = Vec::new();
    let mut last = None;
    for e in entries {
        match e {
            Ok(d) => {
                last = Some(d.entry_id.clone());
                good.push(d);
            }
            Err(p) => {
                tracing::warn!(shard, entry = %p.entry_id, reason = %p.reason, "poison entry: kept in the ledger");
                last = Some(p.entry_id.clone());
                poison.push(p);
            }
        }
    }
    (good, poison, last)
}

/// Where a lease's reads are.
struct Cursor {
    /// The place read up to (ahead of the one committed while the writer works).
    at: Place,
    /// Set when a read showed a new master: the next read starts from the beginning.
    from_start: bool,
}

/// What a reader does after one step of its lease.
enum Next {
    /// Read again.
    Read,
    /// Stop reading under this lease: `true` to acquire it again, `false` to stop.
    Stop(bool),
}

/// Every [`GAUGES_EVERY`] until `shutdown`, for each shard: the stream's length, the age of
/// its oldest entry past the committed place, and a trim to that place (a stream gone idle
/// keeps the entries of its last second otherwise: the writer trims at most once a second,
/// after a commit). Apart from the readers, so the gauges move while a reader waits (for a
/// replica, or on a full channel while MySQL is down). The place is the one this process
/// committed, recorded after its answers were made final (`writer.rs`), so the trim never
/// runs ahead of them; a lease lost since only makes it lower.
pub(crate) async fn watch(
    client: StockClient,
    streams: Vec<(ShardStream, ShardLease)>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(GAUGES_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = crate::signal::stopped(&mut shutdown) => return,
        }
        for (stream, lease) in &streams {
            let shard = lease.shard.to_string();
            if let Ok(len) = stream.len(&client).await {
                metrics::gauge!(m::STREAM_LAG, "shard" => shard.clone()).set(len as f64);
            }
            let Some(at) = lease.committed_at() else {
                continue;
            };
            if let Ok(first) = stream.first_after_ms(&client, &at.last_id).await {
                let age_s = first.map_or(0.0, |ms| {
                    (shard_router::now_ms() - ms).max(0) as f64 / 1000.0
                });
                metrics::gauge!(m::OLDEST_PENDING_SECONDS, "shard" => shard).set(age_s);
            }
            if lease.held() {
                match stream
                    .trim_committed(&client, &at.last_id, &at.repl_id)
                    .await
                {
                    Ok(n) => metrics::counter!(m::TRIMMED).increment(n),
                    Err(e) => tracing::warn!(shard = lease.shard, error = %e, "stream trim failed"),
                }
            }
        }
    }
}

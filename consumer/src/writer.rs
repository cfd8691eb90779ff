//! The batch writer: gathers entries from the channel into batches (flushed at
//! `batch_max_rows` or `batch_max_wait`), commits each batch in one transaction, and only
//! then acknowledges and removes the entries, batch after batch in the order they were
//! drawn (`Turn`). No unit ever goes back from here: every record is an acknowledged claim
//! (a collision is kept too, see `ledger/src/claims.rs`).
//! While MySQL is down it retries the same batch with exponential backoff: nothing is
//! dropped, and the full channel stalls the readers. Late claims a batch found (committed
//! after a rebuild that did not count them, `consumer/src/late.rs`) are counted in Redis right
//! after the commit; a sweep beside the loops repairs any that could not be.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shard_router::{ClaimRecord, ShardId, StockClient};
use sqlx::MySqlPool;
use tokio::sync::{mpsc, watch};

use crate::backoff::Backoff;
use crate::commit::{self, BatchOutcome};
use crate::config::Config;
use crate::inflight::InFlight;
use crate::late;
use crate::metrics as m;
use crate::stream::{Delivered, ShardStream};

/// What the writer needs; shared with nothing but the in-flight set and the health flag.
pub struct Writer {
    pub cfg: Config,
    pub pool: MySqlPool,
    pub client: StockClient,
    pub streams: HashMap<ShardId, ShardStream>,
    pub inflight: InFlight,
    /// False while MySQL refuses batches; recovery pauses then (taking over entries
    /// would only raise their delivery counts toward the dead-letter limit).
    pub db_healthy: Arc<AtomicBool>,
}

/// The receiving end, shared by the writer loops: one loop gathers a batch while another
/// commits, so the network and fsync wait of one overlaps the work of the other.
struct Source {
    rx: mpsc::Receiver<Vec<Delivered>>,
    queue: VecDeque<Delivered>,
    open: bool,
    /// Batches drawn so far: the next batch's place in the settling order.
    drawn: u64,
    /// Flush cuts (`inflight.rs`): a rebuild waits for what this process holds, so an open
    /// batch is closed at once instead of after `batch_max_wait`.
    cuts: watch::Receiver<u64>,
}

impl Source {
    /// The next batch: at most `max_rows`, gathered for at most `max_wait` after its first
    /// entry. `None` once every sender is gone and nothing is left.
    async fn next_batch(
        &mut self,
        max_rows: usize,
        max_wait: std::time::Duration,
    ) -> Option<Vec<Delivered>> {
        while self.queue.is_empty() {
            if !self.open {
                return None;
            }
            match self.rx.recv().await {
                Some(v) => self.queue.extend(v),
                None => self.open = false,
            }
        }
        let deadline = tokio::time::Instant::now() + max_wait;
        // A cut not seen yet closes this batch at once, also one taken while the queue was
        // empty: an entry that arrived since may come from a read sent before it (a reply
        // on its way, a replica wait), and the flush waits for it. At worst one batch
        // closes early.
        while self.open && self.queue.len() < max_rows {
            tokio::select! {
                r = tokio::time::timeout_at(deadline, self.rx.recv()) => match r {
                    Ok(Some(v)) => self.queue.extend(v),
                    Ok(None) => self.open = false,
                    Err(_) => break,
                },
                Ok(()) = self.cuts.changed() => break,
            }
        }
        let n = self.queue.len().min(max_rows);
        self.drawn += 1;
        Some(self.queue.drain(..n).collect())
    }
}

impl Writer {
    /// Runs `cfg.writers` loops until every sender is gone and the last batch is committed
    /// and acknowledged.
    pub async fn run(self, rx: mpsc::Receiver<Vec<Delivered>>) {
        let loops = self.cfg.writers.max(1);
        let me = Arc::new(self);
        let source = Arc::new(tokio::sync::Mutex::new(Source {
            rx,
            queue: VecDeque::new(),
            open: true,
            drawn: 0,
            cuts: me.inflight.cuts(),
        }));
        let turns = Arc::new(watch::channel(0u64).0);
        let (stop_sweep, sweeping) = tokio::sync::watch::channel(false);
        let sweep = tokio::spawn(late::sweep_loop(
            me.pool.clone(),
            me.client.clone(),
            me.cfg.db_timeout,
            me.cfg.replica_wait,
            sweeping,
        ));
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..loops {
            let me = me.clone();
            let source = source.clone();
            let turns = turns.clone();
            set.spawn(async move {
                loop {
                    let next = {
                        let mut src = source.lock().await;
                        let b = src
                            .next_batch(me.cfg.batch_max_rows, me.cfg.batch_max_wait)
                            .await;
                        b.map(|b| (b, Turn::new(&turns, src.drawn - 1)))
                    };
                    match next {
                        Some((b, turn)) => me.commit(b, turn).await,
                        None => break,
                    }
                }
            });
        }
        while set.join_next().await.is_some() {}
        let _ = stop_sweep.send(true);
        let _ = sweep.await;
        tracing::debug!("writer drained");
    }

    /// Commits one batch (retrying through outages), then settles it with Redis.
    async fn commit(&self, batch: Vec<Delivered>, turn: Turn) {
        let records: Vec<&ClaimRecord> = batch.iter().map(|d| &d.record).collect();
        let started = Instant::now();
        let outcome = match self.write_retrying(&records).await {
            Ok(o) => o,
            Err(_) => {
                // Not writable as a batch: write row by row so one bad row cannot block the
                // rest; a row that fails alone stays pending and ends in the dead letters.
                let mut total = BatchOutcome::default();
                let mut failed = Vec::new();
                for d in &batch {
                    match self.write_retrying(&[&d.record]).await {
                        Ok(o) => {
                            total.inserted += o.inserted;
                            total.redelivered += o.redelivered;
                            total.collisions.extend(o.collisions);
                            total.inserted_units += o.inserted_units;
                            total.late.extend(o.late);
                        }
                        Err(e) => {
                            tracing::error!(claim = %d.record.claim_id, error = %e, "row refused by MySQL; left pending");
                            failed.push(d.entry_id.clone());
                        }
                    }
                }
                for d in batch.iter().filter(|d| failed.contains(&d.entry_id)) {
                    self.inflight.remove(d.shard, [d.entry_id.as_str()]);
                }
                let batch: Vec<Delivered> = batch
                    .into_iter()
                    .filter(|d| !failed.contains(&d.entry_id))
                    .collect();
                return self.settle(batch, total, started, turn).await;
            }
        };
        self.settle(batch, outcome, started, turn).await;
    }

    /// Retries retryable errors forever (with backoff); returns non-retryable ones.
    async fn write_retrying(
        &self,
        records: &[&ClaimRecord],
    ) -> Result<BatchOutcome, crate::ConsumerError> {
        let mut backoff = Backoff::new(self.cfg.backoff_min, self.cfg.backoff_max);
        loop {
            match commit::write_refs(&self.pool, records, self.cfg.db_timeout).await {
                Ok(o) => {
                    self.db_healthy.store(true, Ordering::Relaxed);
                    return Ok(o);
                }
                Err(e) if e.is_retryable() => {
                    self.db_healthy.store(false, Ordering::Relaxed);
                    metrics::counter!(m::DB_ERRORS).increment(1);
                    let wait = backoff.step();
                    tracing::warn!(rows = records.len(), error = %e, ?wait, "batch not committed; retrying");
                    tokio::time::sleep(wait).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// After the commit: late claims counted in Redis, then XACK + XDEL per shard.
    async fn settle(
        &self,
        batch: Vec<Delivered>,
        outcome: BatchOutcome,
        started: Instant,
        turn: Turn,
    ) {
        // Committed: no flush waits for these any more (the late apply and XACK below
        // may take a while; a rebuild reads them from the ledger).
        self.inflight
            .committed(batch.iter().map(|d| (d.shard, d.entry_id.as_str())));
        if !outcome.late.is_empty() {
            // First, so the rebuilt slices stop offering these units as soon as possible;
            // a failure here is repaired by the sweep (`late_claims` has them).
            if let Err(e) = late::apply_with(
                &self.pool,
                &self.client,
                &outcome.late,
                self.cfg.db_timeout,
                self.cfg.replica_wait,
            )
            .await
            {
                tracing::warn!(late = outcome.late.len(), error = %e, "late claims not counted yet; the sweep retries");
            }
        }
        crate::final_answers::finalize(&self.client, &batch).await;
        let commit_time = started.elapsed();
        let rows = batch.len();
        metrics::histogram!(m::COMMIT_SECONDS).record(started.elapsed().as_secs_f64());
        metrics::histogram!(m::BATCH_ROWS).record(batch.len() as f64);
        metrics::counter!(m::CLAIMS_COMMITTED).increment(outcome.inserted as u64);
        metrics::counter!(m::REDELIVERED).increment(outcome.redelivered as u64);

        let mut by_shard: BTreeMap<ShardId, Vec<String>> = BTreeMap::new();
        for d in &batch {
            by_shard
                .entry(d.shard)
                .or_default()
                .push(d.entry_id.clone());
        }
        // Shards are independent: acknowledge them concurrently.
        let acks = by_shard.into_iter().map(|(shard, ids)| {
            async move {
                if let Some(stream) = self.streams.get(&shard) {
                    let mut backoff = Backoff::new(self.cfg.backoff_min, self.cfg.backoff_max);
                    for attempt in 0..5 {
                        match stream.ack_and_delete(&self.client, &ids).await {
                            Ok(_) => break,
                            Err(e) => {
                                // Unacknowledged entries are redelivered later; the ledger
                                // ignores them then, so giving up here loses nothing.
                                tracing::warn!(shard, attempt, error = %e, "xack failed");
                                tokio::time::sleep(backoff.step()).await;
                            }
                        }
                    }
                }
                self.inflight.remove(shard, ids.iter().map(String::as_str));
            }
        });
        turn.wait().await;
        futures::future::join_all(acks).await;
        drop(turn);
        tracing::debug!(rows, inserted = outcome.inserted, ?commit_time, total = ?started.elapsed(), "batch settled");
    }
}

/// Longest wait for the batches drawn earlier to settle first; past it a batch settles out
/// of order (correct, only dearer: its ids are deleted one by one).
const TURN_WAIT: Duration = Duration::from_secs(1);

/// A batch's place in the settling order. Batches settle in the order they were drawn, so
/// each shard's entries are acknowledged oldest first and the settle script trims them
/// (`lua/stream_ack.lua`); with two writer loops about one settle in six otherwise came
/// after a newer batch's and had to delete by id. Dropping a turn passes it on, whether its
/// batch settled or its task ended early, so no batch waits for one that never comes.
struct Turn {
    turns: Arc<watch::Sender<u64>>,
    seq: u64,
}

impl Turn {
    fn new(turns: &Arc<watch::Sender<u64>>, seq: u64) -> Self {
        Self {
            turns: turns.clone(),
            seq,
        }
    }

    /// Until every batch drawn before this one has settled (or [`TURN_WAIT`]).
    async fn wait(&self) {
        let mut rx = self.turns.subscribe();
        let _ = tokio::time::timeout(TURN_WAIT, rx.wait_for(|&t| t >= self.seq)).await;
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let next = self.seq + 1;
        self.turns.send_modify(|t| *t = (*t).max(next));
    }
}

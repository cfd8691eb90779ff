//! The batch writer: gathers reads from its channel into batches (flushed at
//! `batch_max_rows` or `batch_max_wait`) and commits each batch in one transaction with the
//! places of its streams (`ledger::claims::write_at`): the rows of a read and the place
//! after it commit together, conditional on the place it started from and on the lease
//! epoch it was read under. No unit ever goes back from here: every record is an
//! acknowledged claim (a collision is kept too, see `ledger/src/claims.rs`).
//!
//! Each shard's reads go to one writer loop (`streams.rs`: shard modulo loops), so a
//! shard's reads commit in the order they were read, each from where the previous one
//! ended; the loops commit concurrently, one gathering while another commits.
//! While MySQL cannot take a batch for a reason that is not the rows' own (down,
//! read-only, a statement killed, a table full, a bug: `ledger::cause`), a loop retries the
//! same batch with bounded backoff for as long as it takes: nothing is dropped or kept as
//! poison, its full channel stalls its readers, and the stall shows on `/healthz` and its
//! gauge (`stall.rs`). Only a batch MySQL refuses for its data is written row by row, and
//! only a row refused for its data alone is kept as poison. A batch whose place is refused (the
//! lease went to another consumer, or a zombie of this one) is rolled back whole; the
//! refused shard's reads are dropped and its reader starts again from the ledger's place,
//! the other shards' reads are committed without them. Late claims a batch found
//! (committed after a rebuild that did not count them, `consumer/src/late.rs`) are counted
//! in Redis right after the commit; a sweep beside the loops repairs any that could not be.
//! After the commit the stream is trimmed to the committed place, at most once per
//! [`TRIM_EVERY`] per shard (`stream_trim.lua`).

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use ledger::claims::{Stored, Written};
use ledger::places::{Advance, Place};
use ledger::poison::Poison as PoisonRow;
use ledger::Cause;
use shard_router::stream::{Delivered, Poison, ShardStream};
use shard_router::{ClaimRecord, ShardId, StockClient};
use sqlx::MySqlPool;
use tokio::sync::{mpsc, watch};

use crate::backoff::Backoff;
use crate::commit;
use crate::config::Config;
use crate::gather::Source;
use crate::inflight::InFlight;
use crate::late;
use crate::lease::ShardLease;
use crate::metrics as m;
use crate::shard::Read;
use crate::stall::{Stall, Stalls};

/// Shortest time between two trims of one shard's stream: one XTRIM then drops every
/// listpack node below the place at once, instead of a call per batch.
pub(crate) const TRIM_EVERY: Duration = Duration::from_secs(1);

/// What the writer loops share.
#[derive(Clone)]
pub struct Writer {
    pub cfg: Config,
    pub pool: MySqlPool,
    pub client: StockClient,
    pub streams: HashMap<ShardId, ShardStream>,
    pub leases: HashMap<ShardId, ShardLease>,
    pub inflight: InFlight,
    /// Each loop's stall, read by the health probes.
    pub stalls: Stalls,
}

impl Writer {
    /// Runs one loop per receiver until every sender is gone and the last batch is
    /// committed; the late-claim sweep runs beside them.
    pub async fn run(self, receivers: Vec<mpsc::Receiver<Read>>) {
        let (stop_sweep, sweeping) = watch::channel(false);
        let sweep = tokio::spawn(late::sweep_loop(
            self.pool.clone(),
            self.client.clone(),
            self.cfg.db_timeout,
            self.cfg.replica_wait,
            sweeping,
        ));
        let mut set = tokio::task::JoinSet::new();
        for (i, rx) in receivers.into_iter().enumerate() {
            let me = self.clone();
            let mut stall = me.stalls.tracker(i);
            let mut source = Source::new(rx, me.inflight.cuts());
            set.spawn(async move {
                let mut trimmed: HashMap<ShardId, Instant> = HashMap::new();
                while let Some(batch) = source
                    .next_batch(me.cfg.batch_max_rows, me.cfg.batch_max_wait)
                    .await
                {
                    me.commit(batch, &mut trimmed, &mut stall).await;
                }
            });
        }
        while set.join_next().await.is_some() {}
        // Every trim not due yet, done now: a stopped consumer leaves only what the ledger
        // does not have.
        for (shard, lease) in self.leases.iter().filter(|(_, l)| l.held()) {
            if let (Some(at), Some(stream)) = (lease.committed_at(), self.streams.get(shard)) {
                if let Err(e) = stream
                    .trim_committed(&self.client, &at.last_id, &at.repl_id)
                    .await
                {
                    tracing::warn!(shard, error = %e, "stream trim failed");
                }
            }
        }
        let _ = stop_sweep.send(true);
        let _ = sweep.await;
        tracing::debug!("writer drained");
    }

    /// Commits one batch (retrying through outages), then settles it.
    async fn commit(
        &self,
        mut batch: Vec<Read>,
        trimmed: &mut HashMap<ShardId, Instant>,
        stall: &mut Stall,
    ) {
        let started = Instant::now();
        // Reads of a lease already lost (or of an older one) would only be refused.
        let mut dropped = drop_reads(&mut batch, |r| r.epoch != self.lease(r.shard).epoch());
        let mut refused: Vec<PoisonRow> = Vec::new();
        // Between attempts of a batch MySQL refuses as a whole while each row alone goes
        // in (its places or poison rows then): the shard stalls here, loudly, until an
        // operator fixes the cause; the rows are in the ledger meanwhile.
        let mut stalled = Backoff::new(self.cfg.backoff_min, self.cfg.backoff_max);
        let outcome = loop {
            if batch.is_empty() {
                break Stored::default();
            }
            let moves = moves(&batch, &self.leases);
            let records: Vec<&ClaimRecord> = batch
                .iter()
                .flat_map(|r| r.entries.iter().map(|d| &d.record))
                .collect();
            let mut poison: Vec<PoisonRow> = batch
                .iter()
                .flat_map(|r| {
                    r.poison
                        .iter()
                        .map(|p| poison_row(&self.lease(r.shard).stream, p))
                })
                .collect();
            poison.extend(refused.iter().cloned());
            match self.write_retrying(&records, &moves, &poison, stall).await {
                Ok((Written::Committed(_), o)) => break o,
                Ok((Written::Fenced(which), _)) => {
                    // Every refused place already where this batch takes it, under its own
                    // lease: an earlier attempt committed and its answer was lost. Done, and
                    // what it found (a collision to fence) is read back from the ledger.
                    match self.committed_before(&moves, &which, &records).await {
                        Ok(Some(o)) => break o,
                        Ok(None) => {}
                        Err(e) => {
                            stall.failed(records.len(), &e);
                            tokio::time::sleep(stalled.step()).await;
                            continue;
                        }
                    }
                    dropped.extend(self.lose_fenced(&moves, &which, &mut batch));
                }
                Err(e) => {
                    // Refused for its data (`Cause::RowFault`): find the rows MySQL refuses
                    // on their own (each written alone; rows are idempotent by claim id),
                    // keep those as poison, and commit the batch again with them passed.
                    stall.failed(records.len(), &e);
                    let found = self.pass_refused(&mut batch, &mut refused, stall).await;
                    if !found {
                        // Every row alone went in: try the batch again (the rows are there).
                        tokio::time::sleep(stalled.step()).await;
                    }
                }
            }
        };
        if !dropped.is_empty() {
            self.commit_placeless(dropped, stall).await;
        }
        if !batch.is_empty() {
            self.settle(batch, outcome, started, trimmed).await;
        }
    }

    /// The shards whose place `which` refused lose their leases (the place moved under this
    /// consumer); their reads are taken out of `batch` and returned.
    fn lose_fenced(
        &self,
        moves: &[(Advance, ShardId)],
        which: &[usize],
        batch: &mut Vec<Read>,
    ) -> Vec<Read> {
        let lost: Vec<(ShardId, u64)> = which
            .iter()
            .map(|&i| (moves[i].1, moves[i].0.epoch))
            .collect();
        for &(shard, epoch) in &lost {
            tracing::warn!(
                shard,
                epoch,
                "stream place moved under this consumer: its reads are dropped"
            );
            metrics::counter!(m::FENCED).increment(1);
            self.lease(shard).lose(epoch);
        }
        drop_reads(batch, |r| lost.contains(&(r.shard, r.epoch)))
    }

    /// Writes each row of `batch` alone (rows are idempotent by claim id), keeps the ones
    /// MySQL refuses on their own in `refused` as poison, and takes them out of `batch` and
    /// out of flight. `true`: a row was refused.
    async fn pass_refused(
        &self,
        batch: &mut [Read],
        refused: &mut Vec<PoisonRow>,
        stall: &mut Stall,
    ) -> bool {
        let mut found = false;
        for r in batch.iter() {
            for d in &r.entries {
                if let Err(e) = self.write_one(&d.record, stall).await {
                    tracing::error!(claim = %d.record.claim_id, error = %e, "row refused by MySQL; kept as poison");
                    refused.push(PoisonRow {
                        stream: self.lease(r.shard).stream.to_string(),
                        entry_id: d.entry_id.clone(),
                        reason: format!("row refused: {e}"),
                        fields: ledger::poison::fields_json(d.record.encode()),
                    });
                    found = true;
                }
            }
        }
        // By stream and id: ids repeat across shards.
        let refused_ids: Vec<(&str, &str)> = refused
            .iter()
            .map(|p| (p.stream.as_str(), p.entry_id.as_str()))
            .collect();
        for r in batch.iter_mut() {
            let stream = self.lease(r.shard).stream.clone();
            let inflight = &self.inflight;
            r.entries.retain(|d| {
                let keep = !refused_ids.contains(&(&*stream, d.entry_id.as_str()));
                if !keep {
                    inflight.remove(r.shard, [d.entry_id.as_str()]);
                }
                keep
            });
        }
        found
    }

    /// Reads whose place was refused, or whose lease is gone: their records are claims
    /// Redis acknowledged, read (and confirmed by a replica) by this consumer, so they are
    /// committed without a place (ignored by claim id where the new owner, or the first
    /// attempt of a commit that timed out, has them already) and their rerouted answers
    /// made final; the place stays the owner's, and nothing is trimmed for them. Without
    /// this a commit that timed out after it committed would leave its answers tentative,
    /// and reads held while the lease moved would be lost with a Redis that lost them
    /// meanwhile, where the earlier consumer-group design committed them as late claims.
    async fn commit_placeless(&self, reads: Vec<Read>, stall: &mut Stall) {
        let records: Vec<&ClaimRecord> = reads
            .iter()
            .flat_map(|r| r.entries.iter().map(|d| &d.record))
            .collect();
        let poison: Vec<PoisonRow> = reads
            .iter()
            .flat_map(|r| {
                r.poison
                    .iter()
                    .map(|p| poison_row(&self.lease(r.shard).stream, p))
            })
            .collect();
        match self.write_retrying(&records, &[], &poison, stall).await {
            Ok((_, outcome)) => {
                self.after_commit(&reads, &outcome).await;
                tracing::info!(
                    rows = records.len(),
                    inserted = outcome.inserted,
                    "reads of a lost lease committed without their place"
                );
            }
            Err(e) => {
                // Not lost: the entries stay in the stream (nothing trims past the owner's
                // place), and the owner reads them.
                tracing::error!(rows = records.len(), error = %e, "reads of a lost lease not committed; the shard's owner reads them");
            }
        }
        for r in &reads {
            self.inflight
                .remove(r.shard, r.entries.iter().map(|d| d.entry_id.as_str()));
        }
    }

    /// The outcome of an earlier attempt of this batch that committed (its answer lost),
    /// when every move `which` names finds its stream at the move's end under its epoch;
    /// `None` when another consumer moved it.
    async fn committed_before(
        &self,
        moves: &[(Advance, ShardId)],
        which: &[usize],
        records: &[&ClaimRecord],
    ) -> Result<Option<Stored<ClaimRecord>>, crate::ConsumerError> {
        let t = self.cfg.db_timeout;
        for &i in which {
            let a = &moves[i].0;
            let at = ledger::places::get(&self.pool, &a.stream, t).await?;
            if !matches!(at, Some((to, epoch, _)) if to == a.to && epoch == a.epoch) {
                return Ok(None);
            }
        }
        let o = commit::committed_before(&self.pool, records, t).await?;
        tracing::warn!(
            rows = records.len(),
            "batch found committed by an attempt whose answer was lost"
        );
        Ok(Some(o))
    }

    fn lease(&self, shard: ShardId) -> &ShardLease {
        &self.leases[&shard]
    }

    /// Retries, with backoff and for as long as it takes, every failure that is not the
    /// rows' own fault: the server's state passes, a bug needs a fix, and neither is a
    /// reason to give a row up. Returns only [`Cause::RowFault`] errors.
    async fn write_retrying(
        &self,
        records: &[&ClaimRecord],
        moves: &[(Advance, ShardId)],
        poison: &[PoisonRow],
        stall: &mut Stall,
    ) -> Result<(Written, Stored<ClaimRecord>), crate::ConsumerError> {
        let mut backoff = Backoff::new(self.cfg.backoff_min, self.cfg.backoff_max);
        let advances: Vec<Advance> = moves.iter().map(|(a, _)| a.clone()).collect();
        loop {
            match commit::write_at(&self.pool, records, &advances, poison, self.cfg.db_timeout)
                .await
            {
                Ok(o) => {
                    stall.moved();
                    return Ok(o);
                }
                Err(e) if e.cause() != Cause::RowFault => {
                    stall.failed(records.len(), &e);
                    tokio::time::sleep(backoff.step()).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// One row alone, without any place, retried as [`Self::write_retrying`] retries:
    /// `Err` only when MySQL refuses this row for its data.
    async fn write_one(
        &self,
        record: &ClaimRecord,
        stall: &mut Stall,
    ) -> Result<(), crate::ConsumerError> {
        let mut backoff = Backoff::new(self.cfg.backoff_min, self.cfg.backoff_max);
        loop {
            match commit::write_refs(&self.pool, &[record], self.cfg.db_timeout).await {
                Ok(_) => return Ok(()),
                Err(e) if e.cause() != Cause::RowFault => {
                    stall.failed(1, &e);
                    tokio::time::sleep(backoff.step()).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// After a commit: a shard that went back in time fenced first, then no flush waits
    /// for these any more, late claims counted in Redis, rerouted answers made final.
    async fn after_commit(&self, reads: &[Read], outcome: &Stored<ClaimRecord>) {
        commit::fence_gone_back(&self.client, outcome).await;
        let entries = || reads.iter().flat_map(|r| r.entries.iter());
        self.inflight
            .committed(entries().map(|d| (d.shard, d.entry_id.as_str())));
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
        crate::final_answers::finalize_records(&self.client, entries().map(|d| &d.record)).await;
    }

    /// After the commit: the above, the places recorded, and the streams trimmed when due.
    async fn settle(
        &self,
        batch: Vec<Read>,
        outcome: Stored<ClaimRecord>,
        started: Instant,
        trimmed: &mut HashMap<ShardId, Instant>,
    ) {
        let entries: Vec<&Delivered> = batch.iter().flat_map(|r| r.entries.iter()).collect();
        self.after_commit(&batch, &outcome).await;
        metrics::histogram!(m::COMMIT_SECONDS).record(started.elapsed().as_secs_f64());
        metrics::histogram!(m::BATCH_ROWS).record(entries.len() as f64);
        metrics::counter!(m::CLAIMS_COMMITTED).increment(outcome.inserted as u64);
        metrics::counter!(m::REDELIVERED).increment(outcome.redelivered as u64);
        for r in &batch {
            self.inflight
                .remove(r.shard, r.entries.iter().map(|d| d.entry_id.as_str()));
        }
        let mut last: BTreeMap<ShardId, &Place> = BTreeMap::new();
        for r in &batch {
            last.insert(r.shard, &r.to);
        }
        for (shard, at) in last {
            self.lease(shard).committed(at);
            let due = trimmed
                .get(&shard)
                .is_none_or(|t| t.elapsed() >= TRIM_EVERY);
            if !due {
                continue;
            }
            trimmed.insert(shard, Instant::now());
            if let Some(stream) = self.streams.get(&shard) {
                match stream
                    .trim_committed(&self.client, &at.last_id, &at.repl_id)
                    .await
                {
                    Ok(n) => metrics::counter!(m::TRIMMED).increment(n),
                    // The next trim covers it: nothing depends on this one.
                    Err(e) => tracing::warn!(shard, error = %e, "stream trim failed"),
                }
            }
        }
        tracing::debug!(rows = entries.len(), inserted = outcome.inserted, total = ?started.elapsed(), "batch committed");
    }
}

/// Takes the reads `gone` names out of `batch` (their in-flight marks stay until they are
/// committed without a place, `Writer::commit_placeless`).
fn drop_reads(batch: &mut Vec<Read>, gone: impl Fn(&Read) -> bool) -> Vec<Read> {
    let (out, keep): (Vec<Read>, Vec<Read>) = std::mem::take(batch).into_iter().partition(gone);
    *batch = keep;
    out
}

/// Each shard's move in `batch`: from the first read's place to the last read's, with
/// its stream key from `leases`, sorted by stream (the lock order of `ledger::claims`).
fn moves(batch: &[Read], leases: &HashMap<ShardId, ShardLease>) -> Vec<(Advance, ShardId)> {
    let mut by: BTreeMap<ShardId, (u64, &Place, &Place)> = BTreeMap::new();
    for r in batch {
        by.entry(r.shard)
            .and_modify(|m| m.2 = &r.to)
            .or_insert((r.epoch, &r.from, &r.to));
    }
    let mut out: Vec<(Advance, ShardId)> = by
        .into_iter()
        .map(|(shard, (epoch, from, to))| {
            (
                Advance {
                    stream: leases[&shard].stream.to_string(),
                    epoch,
                    from: from.clone(),
                    to: to.clone(),
                },
                shard,
            )
        })
        .collect();
    out.sort_by(|a, b| a.0.stream.cmp(&b.0.stream));
    out
}

fn poison_row(stream: &str, p: &Poison) -> PoisonRow {
    PoisonRow {
        stream: stream.to_owned(),
        entry_id: p.entry_id.clone(),
        reason: p.reason.clone(),
        fields: ledger::poison::fields_json(p.fields.iter().map(|(k, v)| (k, v))),
    }
}

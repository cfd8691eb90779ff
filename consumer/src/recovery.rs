//! Pending-entry recovery for one shard: keeps this process's own entries fresh, takes
//! over entries idle past `claim_idle` (a consumer died) with XAUTOCLAIM, and moves entries
//! delivered more than `max_deliveries` times to the dead-letter stream with an anomaly.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shard_router::StockClient;
use sqlx::MySqlPool;
use tokio::sync::{mpsc, watch};

use crate::config::Config;
use crate::error::ConsumerError;
use crate::inflight::InFlight;
use crate::metrics as m;
use crate::replica::ShardReplica;
use crate::stream::{self, Delivered, ShardStream};

/// Entries looked at per XPENDING / XAUTOCLAIM call.
const PAGE: usize = 200;
/// Rounds between prunes of dead, empty consumers from the group.
const PRUNE_EVERY: u64 = 300;
/// A consumer with nothing pending and idle this long is gone for good.
const PRUNE_IDLE: Duration = Duration::from_secs(3600);

pub struct Recovery {
    pub cfg: Config,
    pub client: StockClient,
    pub pool: MySqlPool,
    pub stream: ShardStream,
    /// The shard's replica policy, shared with its reader.
    pub replica: ShardReplica,
    pub inflight: InFlight,
    pub db_healthy: Arc<AtomicBool>,
}

impl Recovery {
    pub async fn run(self, tx: mpsc::Sender<Vec<Delivered>>, mut shutdown: watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(self.cfg.recovery_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut rounds: u64 = 0;
        // Entries taken over wait for room in the writer's channel in a task of their own:
        // a send blocked here (a slow ledger) would stop the refreshes, and other consumers
        // would take over this process's live entries. One such hand-off at a time; no
        // takeover while it waits (more work would only wait too, its deliveries counted).
        let mut handing: Option<tokio::task::JoinHandle<()>> = None;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = crate::signal::stopped(&mut shutdown) => break,
            }
            rounds += 1;
            if rounds.is_multiple_of(PRUNE_EVERY) {
                match self
                    .stream
                    .prune_consumers(&self.client, &self.cfg.consumer_name, PRUNE_IDLE)
                    .await
                {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(
                        shard = self.stream.shard,
                        pruned = n,
                        "removed idle consumers"
                    ),
                    Err(e) => {
                        tracing::warn!(shard = self.stream.shard, error = %e, "prune consumers failed")
                    }
                }
            }
            let take_over = handing.as_ref().is_none_or(|h| h.is_finished());
            match self.round(take_over).await {
                Ok(take) if !take.is_empty() => {
                    let tx = tx.clone();
                    handing = Some(tokio::spawn(async move {
                        let _ = tx.send(take).await;
                    }));
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(shard = self.stream.shard, error = %e, "recovery round failed")
                }
            }
        }
        // The writer drains until every sender is gone: the hand-off ends with it.
        if let Some(h) = handing {
            let _ = h.await;
        }
    }

    /// One round: refresh, then (when MySQL takes writes and `take_over`) take over and
    /// dead-letter. Returns the entries taken over, in flight already, for the writer.
    pub async fn round(&self, take_over: bool) -> Result<Vec<Delivered>, ConsumerError> {
        let s = &self.stream;
        // Only entries whose idle time may have reached a quarter of `claim_idle`: rounds
        // come every `recovery_interval` (< claim_idle / 2, see `config.rs`), so each is
        // refreshed with a quarter of `claim_idle` to spare, and young ones cost nothing.
        let due = self.inflight.due(s.shard, self.cfg.claim_idle / 4);
        let sent = Instant::now();
        s.refresh(&self.client, &self.cfg.consumer_name, &due)
            .await?;
        self.inflight.refreshed(s.shard, &due, sent);
        if let Ok(d) = s.depth(&self.client).await {
            let shard = s.shard.to_string();
            metrics::gauge!(m::STREAM_LAG, "shard" => shard.clone()).set(d.len as f64);
            metrics::gauge!(m::STREAM_PENDING, "shard" => shard.clone()).set(d.pending as f64);
            let age_s = d.oldest_ms.map_or(0.0, |ms| {
                (shard_router::now_ms() - ms).max(0) as f64 / 1000.0
            });
            metrics::gauge!(m::OLDEST_PENDING_SECONDS, "shard" => shard).set(age_s);
        }
        if !take_over || !self.db_healthy.load(Ordering::Relaxed) {
            return Ok(Vec::new());
        }
        let counts = s
            .idle_deliveries(&self.client, self.cfg.claim_idle, PAGE)
            .await?;
        if counts.is_empty() {
            return Ok(Vec::new());
        }
        // XAUTOCLAIM counts a delivery. While no replica confirms, taking entries over
        // would only raise their counts towards the dead letters without committing them:
        // an entry must never be dead-lettered only because the replica is down.
        let before = match self.replica_check().await {
            Check::Skip => {
                metrics::counter!(m::REPLICA_UNCONFIRMED).increment(1);
                return Ok(Vec::new());
            }
            c => c,
        };
        // Registered before XAUTOCLAIM is sent (see `inflight.rs`); dropped on every return.
        let reading = self.inflight.begin();
        let reply = s
            .autoclaim(
                &self.client,
                &self.cfg.consumer_name,
                self.cfg.claim_idle,
                "0-0",
                PAGE,
            )
            .await?;
        for id in &reply.deleted_ids {
            self.deleted_while_pending(id).await?;
        }
        let mut take = Vec::new();
        for entry in &reply.claimed {
            if self.inflight.contains(s.shard, &entry.id) {
                continue;
            }
            // XAUTOCLAIM itself counts as one more delivery.
            let deliveries = counts.get(&entry.id).copied().unwrap_or(0) + 1;
            match stream::decode(s.shard, entry) {
                Ok(d) if deliveries <= self.cfg.max_deliveries => take.push(d),
                Ok(d) => {
                    // The entry's own fields, not a re-encoding: the letter keeps the form
                    // it was written in, which any release that wrote it can redrive.
                    self.dead_letter(
                        &entry.id,
                        &stream::fields_of(entry),
                        &format!("delivered {deliveries} times"),
                        Some(d.record.sku),
                    )
                    .await?;
                }
                Err(p) if deliveries > self.cfg.max_deliveries => {
                    self.dead_letter(&entry.id, &p.fields, &p.reason, None)
                        .await?;
                }
                Err(p) => {
                    tracing::warn!(shard = s.shard, entry = %entry.id, reason = %p.reason, deliveries, "poison entry")
                }
            }
        }
        if let (false, Check::Confirmed(before)) = (take.is_empty(), &before) {
            // The fence before covered the entries (they were idle long before it); this
            // one proves the takeover happened on that same master, not a promoted one.
            match self.replica_check().await {
                Check::Confirmed(after) if after == *before => {}
                _ => {
                    metrics::counter!(m::REPLICA_UNCONFIRMED).increment(1);
                    return Ok(Vec::new());
                }
            }
        }
        if !take.is_empty() {
            metrics::counter!(m::RECOVERED).increment(take.len() as u64);
            tracing::info!(
                shard = s.shard,
                entries = take.len(),
                "took over idle entries"
            );
            self.inflight
                .add(s.shard, take.iter().map(|d| d.entry_id.as_str()), &reading);
        }
        Ok(take)
    }

    /// One fence on the shard (see `replica.rs`), when the policy asks for one.
    async fn replica_check(&self) -> Check {
        let Some(wait) = self.cfg.replica_wait.bound() else {
            return Check::NotRequired;
        };
        // The fence key is how a later process remembers a replica (`ShardReplica::remember`):
        // in `auto`, write it only where a replica is required, or a deployment that never
        // had one would wait for one after its next restart, committing nothing.
        // Every connected replica (see `replica.rs`): the count the master reported last.
        let mut want = 1;
        if matches!(self.cfg.replica_wait, crate::replica::ReplicaWait::Auto(_)) {
            match self.client.replication(self.stream.shard).await {
                Ok(info) if !self.replica.required(&info) => return Check::NotRequired,
                Ok(info) => want = info.replicas_to_wait(),
                Err(e) => {
                    tracing::warn!(shard = self.stream.shard, error = %e, "replication info failed");
                    return Check::Skip;
                }
            }
        }
        match crate::replica::fence_all(&self.client, self.stream.shard, want, wait).await {
            Ok(f) if !self.replica.required(&f.info) => Check::NotRequired,
            Ok(f) if f.acked >= f.info.replicas_to_wait() => Check::Confirmed(f.info.replid),
            Ok(_) => Check::Skip,
            Err(e) => {
                tracing::warn!(shard = self.stream.shard, error = %e, "replica fence failed");
                Check::Skip
            }
        }
    }

    async fn dead_letter(
        &self,
        entry_id: &str,
        fields: &[(String, Vec<u8>)],
        reason: &str,
        sku: Option<u64>,
    ) -> Result<(), ConsumerError> {
        let s = &self.stream;
        let detail = format!("shard {} entry {entry_id} dead-lettered: {reason}", s.shard);
        // The anomaly first: a crash between the two leaves the entry pending (it is
        // dead-lettered again, and the anomaly is recorded once).
        ledger::anomalies::anomaly(
            &self.pool,
            "dead_letter",
            &format!("{}-{entry_id}", s.shard),
            sku,
            &detail,
            self.cfg.db_timeout,
        )
        .await?;
        s.dead_letter(&self.client, entry_id, fields, reason)
            .await?;
        metrics::counter!(m::DEAD_LETTERED).increment(1);
        tracing::error!(
            shard = s.shard,
            entry = entry_id,
            reason,
            "entry moved to the dead-letter stream"
        );
        Ok(())
    }

    /// XAUTOCLAIM reports ids that were pending but are gone from the stream. Our own order
    /// is commit → ack → delete, so such an id should be in the ledger; if not, it is lost.
    async fn deleted_while_pending(&self, entry_id: &str) -> Result<(), ConsumerError> {
        let claim_id = shard_router::codec::ClaimId::new(self.stream.shard, entry_id).to_string();
        let found =
            ledger::consumers::claim_stored(&self.pool, &claim_id, self.cfg.db_timeout).await?;
        if !found {
            let detail = format!("entry {entry_id} was deleted from the stream while pending and is not in the ledger");
            tracing::error!(claim = %claim_id, "{detail}");
            ledger::anomalies::anomaly(
                &self.pool,
                "deleted_pending",
                &claim_id,
                None,
                &detail,
                self.cfg.db_timeout,
            )
            .await?;
        }
        Ok(())
    }
}

/// What a recovery round's replica check found.
enum Check {
    /// No replica wait on this shard.
    NotRequired,
    /// A replica holds everything this master (replication id) wrote so far.
    Confirmed(String),
    /// Not confirmed: take nothing over this round.
    Skip,
}

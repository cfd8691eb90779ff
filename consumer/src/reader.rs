//! One reader per shard stream: XREADGROUP with BLOCK on its own connection, at most one
//! read per [`READ_LINGER`] unless reads come back full, decoded entries into the bounded
//! channel. A slow ledger fills the channel and this loop waits on `send`: reading stalls
//! at that bound instead of piling entries up in memory.

use std::time::Duration;

use shard_router::StockClient;
use tokio::sync::{mpsc, watch};

use crate::backoff::Backoff;
use crate::config::Config;
use crate::inflight::InFlight;
use crate::replica::{Replicated, ShardReplica};
use crate::stream::{Delivered, ShardStream};

/// Shortest time from one read of a shard to the next, unless a read comes back full (or
/// `batch_max_wait` is shorter). Without it a reader under load asks again as soon as its
/// entries are handed on and gets the 3–4 that arrived meanwhile; each read costs Redis a
/// call and an `INFO` whatever it returns (issue 16, `campaign-ops/tests/it/redis_cost.rs`). An
/// entry waits at most this long in Redis before it is read; the writer holds a batch open
/// for `batch_max_wait` anyway. An idle shard still answers its first entry at once: the
/// read blocks in Redis and returns as soon as one arrives.
pub const READ_LINGER: Duration = Duration::from_millis(20);

/// Reads `stream` until `shutdown`; then returns, dropping its sender so the writer drains.
pub async fn run(
    cfg: Config,
    client: StockClient,
    stream: ShardStream,
    replica: ShardReplica,
    inflight: InFlight,
    tx: mpsc::Sender<Vec<Delivered>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut backoff = Backoff::new(cfg.backoff_min, cfg.backoff_max);
    let linger = READ_LINGER.min(cfg.batch_max_wait);
    while !*shutdown.borrow() {
        // Not raced against shutdown: entries Redis hands over must reach the writer, or
        // they would wait for another consumer's XAUTOCLAIM. The block bounds the wait.
        // Registered before the read is sent and kept until its entries are in flight, so a
        // flush cut taken meanwhile waits for them (`inflight.rs`, `flush.rs`).
        let reading = inflight.begin();
        let asked = reading.asked;
        let read = stream
            .read_decoded_under(&client, &cfg.consumer_name, cfg.read_count, cfg.read_block)
            .await;
        let (entries, read_under) = match read {
            Ok(e) => {
                backoff.reset();
                e
            }
            Err(e) => {
                // Nothing delivered: a flush cut must not wait out the backoff below.
                drop(reading);
                tracing::warn!(shard = stream.shard, error = %e, "xreadgroup failed; backing off");
                if e.is_no_group() {
                    let _ = stream.ensure_group(&client).await;
                }
                if !backoff.sleep(&mut shutdown).await {
                    break;
                }
                continue;
            }
        };
        // Asked on every read, empty ones too, so a replica seen once is remembered
        // before the first entry needs it (see `replica.rs`).
        let must_wait = replica.required(&read_under);
        if entries.is_empty() {
            continue;
        }
        let read_len = entries.len();
        let mut batch = Vec::with_capacity(read_len);
        for entry in entries {
            match entry {
                Ok(d) => batch.push(d),
                // Left pending: redelivered by recovery until it reaches the delivery
                // limit, then dead-lettered (a newer consumer may still read it).
                Err(p) => {
                    tracing::warn!(shard = p.shard, entry = %p.entry_id, reason = %p.reason, "poison entry")
                }
            }
        }
        // In flight first: recovery then keeps them fresh instead of taking them over
        // while the replica wait below runs.
        inflight.add(
            stream.shard,
            batch.iter().map(|d| d.entry_id.as_str()),
            &reading,
        );
        drop(reading);
        if must_wait {
            match replica
                .confirm(&client, &read_under, &mut backoff, &mut shutdown)
                .await
            {
                Replicated::Yes => backoff.reset(),
                Replicated::MasterChanged => {
                    // Not committed: the new master hands them out again if it has them.
                    inflight.remove(stream.shard, batch.iter().map(|d| d.entry_id.as_str()));
                    continue;
                }
                // Shutting down: the entries stay pending for another consumer.
                Replicated::Shutdown => break,
            }
        }
        if tx.send(batch).await.is_err() {
            break;
        }
        // A read that was not full took what had arrived: let the next one gather.
        if read_len < cfg.read_count {
            let until = tokio::time::Instant::from_std(asked + linger);
            tokio::select! {
                _ = tokio::time::sleep_until(until) => {}
                _ = crate::signal::stopped(&mut shutdown) => break,
            }
        }
    }
    tracing::debug!(shard = stream.shard, "reader stopped");
}

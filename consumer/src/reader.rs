//! One reader per shard stream: XREADGROUP with BLOCK on its own connection, decoded
//! entries into the bounded channel. A slow ledger fills the channel and this loop waits on
//! `send`: reading stalls at that bound instead of piling entries up in memory.

use shard_router::StockClient;
use tokio::sync::{mpsc, watch};

use crate::backoff::Backoff;
use crate::config::Config;
use crate::inflight::InFlight;
use crate::stream::{self, Delivered, ShardStream};

/// Reads `stream` until `shutdown`; then returns, dropping its sender so the writer drains.
pub async fn run(
    cfg: Config,
    client: StockClient,
    stream: ShardStream,
    inflight: InFlight,
    tx: mpsc::Sender<Vec<Delivered>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut backoff = Backoff::new(cfg.backoff_min, cfg.backoff_max);
    while !*shutdown.borrow() {
        // Not raced against shutdown: entries Redis hands over must reach the writer, or
        // they would wait for another consumer's XAUTOCLAIM. The block bounds the wait.
        let read = stream
            .read_new(&client, &cfg.consumer_name, cfg.read_count, cfg.read_block)
            .await;
        let entries = match read {
            Ok(e) => {
                backoff.reset();
                e
            }
            Err(e) => {
                tracing::warn!(shard = stream.shard, error = %e, "xreadgroup failed; backing off");
                if e.to_string().contains("NOGROUP") {
                    let _ = stream.ensure_group(&client).await;
                }
                if !backoff.sleep(&mut shutdown).await {
                    break;
                }
                continue;
            }
        };
        if entries.is_empty() {
            continue;
        }
        let mut batch = Vec::with_capacity(entries.len());
        for entry in &entries {
            match stream::decode(stream.shard, entry) {
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
        inflight.add(stream.shard, batch.iter().map(|d| d.entry_id.as_str()));
        if let Some(wait) = cfg.replica_wait {
            if !replicated(&client, &stream, wait, &mut backoff, &mut shutdown).await {
                // Shutting down: the entries stay pending for another consumer.
                break;
            }
        }
        if tx.send(batch).await.is_err() {
            break;
        }
    }
    tracing::debug!(shard = stream.shard, "reader stopped");
}

/// Waits until a replica holds this connection's writes so far. XREADGROUP is itself a
/// write (it moves the group), and replication is ordered, so a confirmed read implies the
/// replica also has the entries and their decrements. Retries with backoff until confirmed;
/// false only on shutdown.
async fn replicated(
    client: &StockClient,
    stream: &ShardStream,
    wait: std::time::Duration,
    backoff: &mut Backoff,
    shutdown: &mut watch::Receiver<bool>,
) -> bool {
    loop {
        match client.wait_replicas(stream.shard, 1, wait).await {
            Ok(n) if n >= 1 => return true,
            Ok(_) => tracing::warn!(shard = stream.shard, "no replica confirmed the read yet"),
            Err(e) => {
                tracing::warn!(shard = stream.shard, error = %e, "WAIT after XREADGROUP failed")
            }
        }
        metrics::counter!(crate::metrics::REPLICA_UNCONFIRMED).increment(1);
        if !backoff.sleep(shutdown).await {
            return false;
        }
    }
}

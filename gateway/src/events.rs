//! The Pub/Sub subscriber feeding the sold-out cache with `empty <sku> <shard>` and
//! `restock <sku> <shard>` events, and the live SKU set with `live <sku>`. A plain PUBLISH reaches every node of a cluster, so one
//! connection to any node is enough; on failure the next node in the list is tried.
//!
//! Every (re)connect is followed by a full resync of the cache *after* SUBSCRIBE returned,
//! so nothing published while the subscriber was away is lost for longer than the resync.
//! A ping every few seconds detects a half-open connection that would otherwise stay silent.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use shard_router::keys::EVENTS_CHANNEL;
use shard_router::ShardId;
use tokio::sync::watch;

use crate::cache::SoldOutCache;
use crate::config::PubsubNodes;
use crate::link::RedisLink;
use crate::metrics::PUBSUB_RECONNECTS;

const PING_EVERY: Duration = Duration::from_secs(3);
const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// A parsed event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    /// A slice reached 0 (`empty`) or got units back (`restock`).
    Shard {
        sku: u64,
        shard: ShardId,
        empty: bool,
    },
    /// A SKU was preheated.
    Live { sku: u64 },
    /// A stored answer appeared outside a claim (`lua/rebuild_late.lua`).
    Replay { sku: u64 },
}

impl Event {
    pub(crate) fn parse(msg: &str) -> Option<Self> {
        let mut parts = msg.split(' ');
        let empty = match parts.next()? {
            "empty" => true,
            "restock" => false,
            "live" => {
                let sku = parts.next()?.parse().ok()?;
                return parts.next().is_none().then_some(Self::Live { sku });
            }
            "replay" => {
                let sku = parts.next()?.parse().ok()?;
                return parts.next().is_none().then_some(Self::Replay { sku });
            }
            _ => return None,
        };
        let sku = parts.next()?.parse().ok()?;
        let shard = parts.next()?.parse().ok()?;
        parts
            .next()
            .is_none()
            .then_some(Self::Shard { sku, shard, empty })
    }
}

/// Runs until shutdown.
pub(crate) async fn subscribe(
    nodes: PubsubNodes,
    link: Arc<RedisLink>,
    cache: SoldOutCache,
    timeout: Duration,
    live_refresh: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    // Resync needs the client: wait for the first connection.
    let Some(client) = link.wait_client(&mut shutdown).await else {
        return;
    };
    let mut backoff = plumbing::Backoff::new(BACKOFF_MIN, BACKOFF_MAX);
    let mut attempt: usize = 0;
    let mut connected_before = false;
    while !*shutdown.borrow() {
        // No connection (first pass, or the last one was lost): events may be missed.
        cache.set_subscribed(false);
        let node = nodes.pick(attempt);
        attempt += 1;
        let (mut sink, mut stream) = match connect(node, timeout).await {
            Ok(ps) => ps.split(),
            Err(e) => {
                tracing::warn!(node = %node, error = %e, "pubsub connect failed");
                if !backoff.sleep(&mut shutdown).await {
                    return;
                }
                continue;
            }
        };
        if connected_before {
            metrics::counter!(PUBSUB_RECONNECTS).increment(1);
        }
        connected_before = true;
        backoff.reset();
        cache.resync(&client).await;
        cache.set_subscribed(true);
        tracing::info!(node = %node, "pubsub subscribed; cache resynced");

        let mut ping = tokio::time::interval(PING_EVERY);
        ping.tick().await;
        // A `live` event lost while the connection stayed up (a cluster bus hiccup, a
        // writer that does not publish) must not hide a SKU for longer than this.
        let mut refresh = tokio::time::interval(live_refresh);
        refresh.tick().await;
        loop {
            tokio::select! {
                _ = refresh.tick() => cache.reload_live(&client).await,
                msg = stream.next() => {
                    let Some(msg) = msg else {
                        tracing::warn!(node = %node, "pubsub connection lost");
                        break;
                    };
                    let text: String = msg.get_payload().unwrap_or_default();
                    match Event::parse(&text) {
                        Some(Event::Shard { sku, shard, empty }) => cache.apply(sku, shard, empty),
                        Some(Event::Live { sku }) => cache.mark_live(sku),
                        Some(Event::Replay { sku }) => cache.drop_replay_users(sku),
                        None => tracing::debug!(payload = %text, "ignoring unknown event"),
                    }
                }
                _ = ping.tick() => {
                    let alive = tokio::time::timeout(timeout, sink.ping::<redis::Value>()).await;
                    if !matches!(alive, Ok(Ok(_))) {
                        tracing::warn!(node = %node, "pubsub ping failed");
                        break;
                    }
                }
                _ = crate::stopped(&mut shutdown) => return,
            }
        }
    }
}

async fn connect(node: &str, timeout: Duration) -> redis::RedisResult<redis::aio::PubSub> {
    let fut = async {
        let mut ps = redis::Client::open(node)?.get_async_pubsub().await?;
        ps.subscribe(EVENTS_CHANNEL).await?;
        Ok(ps)
    };
    tokio::time::timeout(timeout, fut)
        .await
        .unwrap_or_else(|_| {
            Err(redis::RedisError::from((
                redis::ErrorKind::Io,
                "pubsub connect timed out",
            )))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_events() {
        let ev = |sku, shard, empty| Some(Event::Shard { sku, shard, empty });
        assert_eq!(Event::parse("empty 42 3"), ev(42, 3, true));
        assert_eq!(Event::parse("restock 42 15"), ev(42, 15, false));
        assert_eq!(Event::parse("live 42"), Some(Event::Live { sku: 42 }));
        assert_eq!(Event::parse("replay 42"), Some(Event::Replay { sku: 42 }));
        for bad in [
            "",
            "empty",
            "empty 42",
            "empty x 1",
            "empty 1 2 3",
            "drain 1 2",
            "empty 1 -2",
            "live",
            "live x",
            "live 1 2",
            "replay",
            "replay 1 2",
        ] {
            assert_eq!(Event::parse(bad), None, "{bad:?}");
        }
    }
}

//! The waiting room's state in a gateway (campaign mode `queue`): the shared queue secret
//! (`--queue-secret-file`) and each queue's admitted watermark, cached briefly so a waiting
//! client's refresh is answered from memory. The gate itself is
//! `api/claim/queue.rs`; it lives apart from the API so `App` holds it without importing
//! the API.

use std::time::{Duration, Instant};

use moka::sync::Cache;
use shard_router::queue::{QueueKey, QueueState};
use shard_router::{StockClient, StockError};

/// How long a gateway trusts its copy of a queue's state.
const STATE_TTL: Duration = Duration::from_millis(250);

/// The waiting room's part of a gateway: its queue secret and the queues' states.
pub(crate) struct QueueGate {
    key: Option<QueueKey>,
    states: Cache<u64, (Instant, QueueState)>,
}

impl QueueGate {
    pub(crate) fn new(key: Option<QueueKey>) -> Self {
        Self {
            key,
            states: Cache::new(10_000),
        }
    }

    /// The queue secret, when configured.
    pub(crate) fn key(&self) -> &Option<QueueKey> {
        &self.key
    }

    /// The queue's state, at most `STATE_TTL` old.
    pub(crate) async fn state(
        &self,
        client: &StockClient,
        sku: u64,
    ) -> Result<QueueState, StockError> {
        if let Some((at, s)) = self.states.get(&sku) {
            if at.elapsed() < STATE_TTL {
                return Ok(s);
            }
        }
        let s = client.queue_state(sku).await?;
        self.states.insert(sku, (Instant::now(), s));
        Ok(s)
    }
}

//! Which stock shards this process can reach. On Redis Cluster a master that is down (or
//! failing over) takes only its own shards with it, so readiness and the operator's view
//! ask per shard: one PING per shard, routed to the master serving that shard's slot. A
//! plain PING would not do: redis-rs fans it out to every master and fails when any fails.

use redis::Value;

use crate::client::StockClient;
use crate::error::StockError;
use crate::placement::{slot_of_tag, ShardId};

/// The answer of one probe round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardHealth {
    /// Shards whose master did not answer within the response timeout, ascending.
    pub unreachable: Vec<ShardId>,
    /// Stock shards of the deployment.
    pub total: u16,
}

impl ShardHealth {
    /// At least one shard answered: some claims can be served.
    pub fn any_reachable(&self) -> bool {
        self.unreachable.len() < usize::from(self.total)
    }
}

impl StockClient {
    /// PINGs every shard's master, all at once, each under the response timeout. A single
    /// Redis serves every shard, so one PING stands for all of them. With replica
    /// durability the probe is `INFO replication` instead, and each master's count of
    /// online replicas (past their sync) becomes what the claim batches' WAIT asks for (`batch.rs`).
    /// The claim batches' near connection, if any, is PINGed beside it (its answer says
    /// only whether batches may use it: `StockClient::probe_near`).
    pub async fn shard_health(&self) -> ShardHealth {
        let total = self.placement().shard_count();
        if !self.conn().is_cluster() {
            let (own, ()) = tokio::join!(self.probe_shard(0), self.probe_near(0));
            let unreachable = match own {
                Ok(n) => {
                    (0..total).for_each(|s| self.set_replicas(s, n));
                    Vec::new()
                }
                Err(_) => (0..total).collect(),
            };
            return ShardHealth { unreachable, total };
        }
        let mut pings = tokio::task::JoinSet::new();
        for shard in 0..total {
            let client = self.clone();
            pings.spawn(async move {
                let (own, ()) = tokio::join!(client.probe_shard(shard), client.probe_near(shard));
                (shard, own)
            });
        }
        let mut unreachable = Vec::new();
        while let Some(done) = pings.join_next().await {
            match done {
                Ok((shard, Ok(n))) => self.set_replicas(shard, n),
                Ok((shard, Err(e))) => {
                    tracing::debug!(shard, error = %e, "shard unreachable");
                    unreachable.push(shard);
                }
                // A panicked or cancelled ping tells nothing about Redis; it cannot happen
                // short of a bug, and is not counted either way.
                Err(e) => tracing::warn!(error = %e, "shard ping task failed"),
            }
        }
        unreachable.sort_unstable();
        ShardHealth { unreachable, total }
    }

    /// Each shard's slice of a SKU, like [`StockClient::slices`], but read from all shards
    /// at once and leaving out a shard that does not answer instead of failing the whole
    /// call: one master down must not hide the slices the other masters hold.
    pub async fn slices_answered(&self, sku: u64, width: u16) -> Vec<(ShardId, Option<i64>)> {
        let mut reads = tokio::task::JoinSet::new();
        for shard in self.placement().shards_of(sku, width) {
            let client = self.clone();
            let key = crate::keys::ShardKeys::new(self.placement(), shard, sku).stock();
            reads.spawn(async move {
                let mut conn = client.conn();
                let v = client
                    .bounded("slices", redis::cmd("GET").arg(key).query_async(&mut conn))
                    .await;
                (shard, v)
            });
        }
        let mut out = Vec::new();
        while let Some(done) = reads.join_next().await {
            match done {
                Ok((shard, Ok(v))) => out.push((shard, v)),
                Ok((shard, Err(e))) => tracing::debug!(shard, sku, error = %e, "slice unread"),
                Err(e) => tracing::warn!(error = %e, "slice read task failed"),
            }
        }
        out.sort_unstable_by_key(|(shard, _)| *shard);
        out
    }

    /// `INFO <section>` of the master serving `shard` (each shard's own node on a cluster).
    pub async fn shard_info(&self, shard: ShardId, section: &str) -> Result<String, StockError> {
        let slot = slot_of_tag(self.placement().tag(shard));
        let mut cmd = redis::cmd("INFO");
        cmd.arg(section);
        let mut conn = self.conn();
        let v = self.bounded("info", conn.on_slot_master(cmd, slot)).await?;
        redis::from_redis_value(v).map_err(|source| StockError::Redis {
            op: "info",
            source: source.into(),
        })
    }

    /// One probe of `shard`'s master: the replicas it counts online when replica
    /// durability is on, else a PING (0).
    async fn probe_shard(&self, shard: ShardId) -> Result<u32, StockError> {
        if self.config().replica_ack.is_none() {
            let slot = slot_of_tag(self.placement().tag(shard));
            return self.ping_slot(slot).await.map(|()| 0);
        }
        Ok(self.replication(shard).await?.online_replicas)
    }

    async fn ping_slot(&self, slot: u16) -> Result<(), StockError> {
        let mut conn = self.conn();
        let v = self
            .bounded("ping", conn.on_slot_master(redis::cmd("PING"), slot))
            .await?;
        match v {
            Value::SimpleString(_) | Value::Okay | Value::BulkString(_) => Ok(()),
            other => Err(StockError::Protocol {
                op: "ping",
                detail: format!("PING answered {other:?}"),
            }),
        }
    }
}

//! Fences and replica reads on a shard's master: the client side of `replication.rs` (see
//! its module doc for why a fence, not a bare `WAIT`, confirms replication). Here rather
//! than in `replication.rs` so that the values stay below the batch, which the client uses.

use std::time::Duration;

use redis::Value;

use super::StockClient;
use crate::conn::RedisConn;
use crate::error::StockError;
use crate::keys;
use crate::placement::ShardId;
use crate::replication::{replica_count, Fence, ReplicationInfo};

impl StockClient {
    /// True when `shard`'s fence exists: some process waited for a replica of this shard
    /// before, and the fence replicated with everything else (a consumer restarted while the
    /// replica is away remembers it through this).
    pub async fn fenced_before(&self, shard: ShardId) -> Result<bool, StockError> {
        let mut conn = self.conn();
        self.bounded(
            "fence exists",
            redis::cmd("EXISTS")
                .arg(keys::fence(self.placement(), shard))
                .query_async(&mut conn),
        )
        .await
    }

    /// Writes `shard`'s fence and waits up to `wait` for `replicas` to acknowledge it, on
    /// one connection (see the module doc). `acked >= replicas` with `info.replid` equal to
    /// the id seen earlier means a replica holds everything that master wrote before.
    pub async fn fence(
        &self,
        shard: ShardId,
        replicas: u32,
        wait: Duration,
    ) -> Result<Fence, StockError> {
        // WAIT 0 blocks forever on the Redis side.
        let wait = wait.max(Duration::from_millis(1));
        let mut pipe = redis::pipe();
        pipe.cmd("INCR").arg(keys::fence(self.placement(), shard));
        pipe.cmd("WAIT").arg(replicas).arg(wait.as_millis() as u64);
        pipe.cmd("INFO").arg("replication");
        let after = wait + self.config().timeouts.response;
        let mut conn = self.conn();
        let fut = pipe.query_async::<(i64, i64, String)>(&mut conn);
        match tokio::time::timeout(after, fut).await {
            Ok(Ok((_, acked, info))) => Ok(Fence {
                acked: replica_count(acked),
                info: ReplicationInfo::parse(&info),
            }),
            Ok(Err(source)) => Err(StockError::Redis {
                op: "fence",
                source,
            }),
            Err(_) => Err(StockError::Timeout { op: "fence", after }),
        }
    }

    /// Runs the read `cmd` (keys on `shard`'s tag only) and a fence behind it, in one
    /// pipeline on one connection: the fence's master is the one that answered the read,
    /// so `acked >= replicas` means a replica holds what the read saw, with no window for
    /// a failover between the read and the fence.
    pub async fn read_fenced<T: redis::FromRedisValue>(
        &self,
        shard: ShardId,
        cmd: redis::Cmd,
        replicas: u32,
        wait: Duration,
    ) -> Result<(T, Fence), StockError> {
        let wait = wait.max(Duration::from_millis(1));
        let mut pipe = redis::pipe();
        pipe.add_command(cmd);
        pipe.cmd("INCR").arg(keys::fence(self.placement(), shard));
        pipe.cmd("WAIT").arg(replicas).arg(wait.as_millis() as u64);
        pipe.cmd("INFO").arg("replication");
        let after = wait + self.config().timeouts.response;
        let mut conn = self.conn();
        let fut = pipe.query_async::<(T, i64, i64, String)>(&mut conn);
        match tokio::time::timeout(after, fut).await {
            Ok(Ok((read, _, acked, info))) => Ok((
                read,
                Fence {
                    acked: replica_count(acked),
                    info: ReplicationInfo::parse(&info),
                },
            )),
            Ok(Err(source)) => Err(StockError::Redis {
                op: "read fenced",
                source,
            }),
            Err(_) => Err(StockError::Timeout {
                op: "read fenced",
                after,
            }),
        }
    }

    /// How many replicas confirmed everything `shard`'s master wrote before this call: a
    /// [`Self::fence`]. (It does not guard against a failover before the call; callers
    /// that need that compare [`Fence::info`].)
    pub async fn wait_replicas(
        &self,
        shard: ShardId,
        replicas: u32,
        wait: Duration,
    ) -> Result<u32, StockError> {
        Ok(self.fence(shard, replicas, wait).await?.acked)
    }

    /// `INFO replication` of the master that owns `shard`.
    pub async fn replication(&self, shard: ShardId) -> Result<ReplicationInfo, StockError> {
        let mut cmd = redis::cmd("INFO");
        cmd.arg("replication");
        let info: String = self.on_master("info replication", shard, cmd).await?;
        Ok(ReplicationInfo::parse(&info))
    }

    /// Runs a keyless `cmd` on the master that owns `shard` (on a single Redis, on it).
    pub(crate) async fn on_master<T: redis::FromRedisValue>(
        &self,
        op: &'static str,
        shard: ShardId,
        cmd: redis::Cmd,
    ) -> Result<T, StockError> {
        let fut = async {
            match self.conn() {
                RedisConn::Single(mut c) => cmd.query_async::<T>(&mut c).await,
                RedisConn::Cluster(mut c) => {
                    use redis::cluster_routing::{
                        Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr,
                    };
                    let slot = crate::placement::slot_of_tag(self.placement().tag(shard));
                    let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
                        Route::new(slot, SlotAddr::Master),
                    ));
                    let v: Value = c.route_command(cmd, route).await?;
                    Ok(redis::from_redis_value::<T>(v)?)
                }
            }
        };
        self.bounded(op, fut).await
    }
}

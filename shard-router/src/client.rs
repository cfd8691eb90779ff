//! `StockClient`: the typed Lua calls. Each method builds one script invocation for one
//! shard (so every key shares the shard's hash slot), runs it under a timeout, and decodes
//! the integer codes into the enums of `outcome.rs`. This file holds the client itself
//! (connection, timeouts, batching); the calls are grouped by what they serve:
//! `client/campaign.rs` (preheat, SKU metadata, slices), `client/claim.rs` (claim, take,
//! settle), `client/release.rs` (holds, releases, user counts) and `client/fence.rs`
//! (fences and `INFO replication` on a shard's master).

use std::sync::Arc;
use std::time::Duration;

use redis::{ScriptInvocation, Value};

use crate::batch::{Batcher, Via};
use crate::conn::{RedisConn, RedisTarget, Timeouts};
use crate::error::StockError;
use crate::guard::{Guards, Selling};
use crate::keys::{CachedKeys, KeyCache};
use crate::outcome::Confirmation;
use crate::placement::{Placement, ShardId};
use crate::reply::Reply;
use crate::scripts;

/// Room reserved for one batched script call: arguments, and bytes of their data.
const CALL_ARGS: usize = 24;
const CALL_BYTES: usize = 640;

/// Settings of a [`StockClient`].
#[derive(Debug, Clone)]
pub struct StockConfig {
    pub target: RedisTarget,
    /// Stock shard count S; fixed for a deployment's lifetime.
    pub shards: u16,
    pub timeouts: Timeouts,
    /// How long a hold may stand before the consumer may resolve it against the ledger.
    /// Must be far above the gateway's whole claim deadline.
    pub hold_ttl: Duration,
    /// How long a successful answer is kept for replay under its request id.
    pub request_ttl: Duration,
    /// Replica durability: every claim pipeline ends with `WAIT 1 <this>`, on the
    /// connection that ran its scripts, and the protocol reports what it confirmed (see
    /// `batch.rs`). `None`: no WAIT.
    pub replica_ack: Option<Duration>,
    /// On a cluster, read-only commands (the consumer's XREAD) go to a replica of the
    /// slot's master where it has one (READONLY connections); writes still go to the
    /// master. Only for a client that sends nothing else: the claim path must not.
    pub read_from_replicas: bool,
}

impl StockConfig {
    pub const DEFAULT_HOLD_TTL: Duration = Duration::from_secs(30);
    pub const DEFAULT_REQUEST_TTL: Duration = Duration::from_secs(24 * 3600);

    pub fn new(target: RedisTarget, shards: u16) -> Self {
        Self {
            target,
            shards,
            timeouts: Timeouts::default(),
            hold_ttl: Self::DEFAULT_HOLD_TTL,
            request_ttl: Self::DEFAULT_REQUEST_TTL,
            replica_ack: None,
            read_from_replicas: false,
        }
    }
}

/// Typed access to the stock shards. Cheap to clone; clones share one connection.
#[derive(Clone)]
pub struct StockClient {
    conn: RedisConn,
    placement: Arc<Placement>,
    cfg: Arc<StockConfig>,
    batcher: Arc<Batcher>,
    /// The selling scripts loaded on each process, naming it (`guard.rs`).
    guards: Arc<Guards>,
    /// The key names of the (SKU, shard) pairs named lately, built once each.
    keys: Arc<KeyCache>,
}

impl StockClient {
    pub async fn connect(cfg: StockConfig) -> Result<Self, StockError> {
        let placement =
            Placement::new(cfg.shards).map_err(|e| StockError::InvalidArgument(e.to_string()))?;
        let conn = RedisConn::connect(&cfg.target, cfg.timeouts, cfg.read_from_replicas).await?;
        Ok(Self {
            conn,
            placement: Arc::new(placement),
            batcher: Arc::new(Batcher::new(
                cfg.shards,
                cfg.timeouts.response,
                cfg.replica_ack,
            )),
            guards: Arc::new(Guards::new(cfg.shards)),
            keys: Arc::default(),
            cfg: Arc::new(cfg),
        })
    }

    /// Makes a second connection on the current runtime for the claim batches, used while
    /// that runtime is idle (`batch.rs`, `Batcher::attach_near`). For a client connected
    /// on a runtime of its own, called on the runtime its callers run on.
    pub async fn connect_near(&self) -> Result<(), StockError> {
        let cfg = &self.cfg;
        let conn = RedisConn::connect(&cfg.target, cfg.timeouts, cfg.read_from_replicas).await?;
        self.batcher.attach_near(conn);
        Ok(())
    }

    /// PINGs `shard`'s master through the near connection, if there is one, and records
    /// whether it answered (`Batcher::set_near_ok`): the probe keeps it from idling past a
    /// server `timeout`, and finds it closed before a claim does (`health.rs`).
    pub(crate) async fn probe_near(&self, shard: ShardId) {
        let Some(mut conn) = self.batcher.near_conn() else {
            return;
        };
        let slot = crate::placement::slot_of_tag(self.placement.tag(shard));
        let ping = conn.on_slot_master(redis::cmd("PING"), slot);
        let ok = self.bounded("ping near", ping).await.is_ok();
        // One queue serves every shard of a single Redis (`batch.rs`).
        let queue = if self.conn.is_cluster() { shard } else { 0 };
        self.batcher.set_near_ok(queue, ok);
    }

    /// True on Redis Cluster (shards on several masters), false on a single Redis.
    pub fn is_cluster(&self) -> bool {
        self.conn.is_cluster()
    }

    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    pub fn config(&self) -> &StockConfig {
        &self.cfg
    }

    /// Records how many replicas `shard`'s master counts connected (the health probe).
    pub(crate) fn set_replicas(&self, shard: ShardId, n: u32) {
        self.batcher.set_replicas(shard, n);
    }

    /// How many replicas must acknowledge a write on `shard` before it counts as
    /// confirmed: every one its master counted connected at the last probe, at least one.
    pub fn replicas_to_wait(&self, shard: ShardId) -> u32 {
        self.batcher.replicas_to_wait(shard)
    }

    /// A clone of the underlying connection. Only this crate issues commands on its keys;
    /// tests (feature `test-util`) also use it to inject faults and read raw keys.
    #[cfg(feature = "test-util")]
    pub fn conn(&self) -> RedisConn {
        self.conn.clone()
    }

    #[cfg(not(feature = "test-util"))]
    pub(crate) fn conn(&self) -> RedisConn {
        self.conn.clone()
    }

    /// Runs `fut` under the response timeout, naming `op` in any error.
    pub(crate) async fn bounded<T>(
        &self,
        op: &'static str,
        fut: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, StockError> {
        let after = self.cfg.timeouts.response;
        match tokio::time::timeout(after, fut).await {
            Ok(r) => r.map_err(|source| StockError::Redis { op, source }),
            Err(_) => Err(StockError::Timeout { op, after }),
        }
    }

    /// Sends `cmd` with `shard`'s next claim batch (see `batch.rs`), through the connection
    /// `pin` names if any, under the timeout (plus the batch's WAIT): the connection that
    /// carried it, the reply, and what the batch's WAIT counted.
    async fn batched(
        &self,
        op: &'static str,
        shard: ShardId,
        cmd: redis::Cmd,
        pin: Option<Via>,
    ) -> (Via, Result<(Value, Option<u32>), StockError>) {
        let after = self.cfg.timeouts.response + self.cfg.replica_ack.unwrap_or_default();
        let call = self.batcher.call(&self.conn, shard, cmd, pin);
        match tokio::time::timeout(after, call).await {
            Ok((via, r)) => (via, r.map_err(|source| StockError::Redis { op, source })),
            Err(_) => (
                pin.unwrap_or(Via::Own),
                Err(StockError::Timeout { op, after }),
            ),
        }
    }

    /// Runs the selling script `which` (its keys and args built by `args`) with `shard`'s
    /// next batch, as loaded on the shard's master (`guard.rs`). NOSCRIPT means the script
    /// did not run: the call reached a process this client has not loaded it on (a restart,
    /// a failover, a `SCRIPT FLUSH`). Learn that process and send the same call once more,
    /// both within one more response timeout, and both through the connection that answered
    /// NOSCRIPT: after a failover the client's two connections (`Batcher::attach_near`) may
    /// route the shard's slot to different nodes until a MOVED corrects one, and only the
    /// one that answered reached the process to learn. The guard's refusal is
    /// [`StockError::Restoring`]. Answers the reply with what replica durability confirmed
    /// of the batch.
    async fn script_batched(
        &self,
        op: &'static str,
        shard: ShardId,
        which: Selling,
        args: impl Fn(&mut redis::Cmd),
    ) -> Result<(Reply, Confirmation), StockError> {
        let call = |sha: &str, pin: Option<Via>| {
            // Sized for the claim, the largest call (19 arguments, ~450 bytes with ids of
            // 64 bytes): growing from empty was 7 reallocations per claim.
            let mut cmd = redis::Cmd::with_capacity(CALL_ARGS, CALL_BYTES);
            cmd.arg("EVALSHA").arg(sha);
            args(&mut cmd);
            self.batched(op, shard, cmd, pin)
        };
        let guarded = self.guarded(shard).await?;
        let (value, acked) = match call(guarded.script(which).get_hash(), None).await {
            (via, Err(StockError::Redis { source, .. }))
                if source.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
            {
                let after = self.cfg.timeouts.response;
                let retry = async {
                    let conn = self.batcher.conn_via(via, &self.conn);
                    let again = self
                        .guards
                        .relearn(&conn, &self.placement, shard, Some(&guarded))
                        .await?;
                    call(again.script(which).get_hash(), Some(via)).await.1
                };
                tokio::time::timeout(after, retry)
                    .await
                    .unwrap_or(Err(StockError::Timeout { op, after }))?
            }
            (_, r) => r?,
        };
        let reply = Reply::parse(op, value)?;
        if reply.code == scripts::code::RESTORING {
            return Err(StockError::Restoring { op });
        }
        Ok((reply, Confirmation::of(acked)))
    }

    /// The selling scripts loaded on `shard`'s master, loading them first if none are.
    async fn guarded(&self, shard: ShardId) -> Result<Arc<crate::guard::Guarded>, StockError> {
        if let Some(g) = self.guards.cached(&self.conn, shard) {
            return Ok(g);
        }
        let after = self.cfg.timeouts.response * 2;
        let learn = self.guards.for_shard(&self.conn, &self.placement, shard);
        tokio::time::timeout(after, learn)
            .await
            .unwrap_or(Err(StockError::Timeout {
                op: "learn server",
                after,
            }))
    }

    pub(crate) async fn run(
        &self,
        op: &'static str,
        inv: &ScriptInvocation<'_>,
    ) -> Result<Reply, StockError> {
        let mut conn = self.conn.clone();
        let value: Value = self.bounded(op, inv.invoke_async(&mut conn)).await?;
        Reply::parse(op, value)
    }

    /// Round trip to Redis (every master of a cluster answers through the routing).
    pub async fn ping(&self) -> Result<(), StockError> {
        let mut conn = self.conn.clone();
        self.bounded("ping", redis::cmd("PING").query_async::<String>(&mut conn))
            .await
            .map(drop)
    }

    /// Loads every script ahead of traffic, so readiness means "scripts loaded": the
    /// plain ones everywhere, the selling ones on every shard's master.
    pub async fn load_scripts(&self) -> Result<(), StockError> {
        for s in scripts::all() {
            let mut conn = self.conn.clone();
            self.bounded("script load", s.load_async(&mut conn)).await?;
        }
        let shards = if self.conn.is_cluster() {
            self.cfg.shards
        } else {
            1
        };
        // Every shard tried: one master down must not leave the others unloaded.
        let mut first_err = None;
        for shard in 0..shards {
            if let Err(e) = self.guarded(shard).await {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// The names of `shard`'s keys for `sku`, from the client's cache.
    pub(crate) fn keys(&self, shard: ShardId, sku: u64) -> Arc<CachedKeys> {
        self.keys.get(&self.placement, shard, sku)
    }
}

mod campaign;
mod claim;
mod draw;
mod queue;
pub use draw::GRANT_REQUEST;
pub use queue::Joined;
mod fence;
mod release;
mod retire;
mod vouch;
pub use vouch::ServerIdentity;

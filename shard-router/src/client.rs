//! `StockClient`: the typed Lua calls. Each method builds one script invocation for one
//! shard (so every key shares the shard's hash slot), runs it under a timeout, and decodes
//! the integer codes into the enums of `outcome.rs`.

use std::sync::Arc;
use std::time::Duration;

use redis::{AsyncCommands, ScriptInvocation, Value};

use crate::batch::Batcher;
use crate::conn::{RedisConn, RedisTarget, Timeouts};
use crate::error::StockError;
use crate::keys::{self, ShardKeys};
use crate::outcome::*;
use crate::placement::{Placement, ShardId};
use crate::reply::Reply;
use crate::scripts::{self, code};

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
}

impl StockClient {
    pub async fn connect(cfg: StockConfig) -> Result<Self, StockError> {
        let placement =
            Placement::new(cfg.shards).map_err(|e| StockError::InvalidArgument(e.to_string()))?;
        let conn = RedisConn::connect(&cfg.target, cfg.timeouts).await?;
        Ok(Self {
            conn,
            placement: Arc::new(placement),
            batcher: Arc::new(Batcher::new(
                cfg.shards,
                cfg.timeouts.response,
                cfg.replica_ack,
            )),
            cfg: Arc::new(cfg),
        })
    }

    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    pub fn config(&self) -> &StockConfig {
        &self.cfg
    }

    /// A clone of the underlying connection, for callers that issue their own commands
    /// (stream reads, metadata, tests).
    pub fn conn(&self) -> RedisConn {
        self.conn.clone()
    }

    /// Runs `fut` under the response timeout, naming `op` in any error.
    pub async fn bounded<T>(
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

    /// Sends `cmd` with `shard`'s next claim batch (see `batch.rs`), under the timeout
    /// (plus the batch's WAIT): the reply, and what the batch's WAIT counted.
    async fn batched(
        &self,
        op: &'static str,
        shard: ShardId,
        cmd: redis::Cmd,
    ) -> Result<(Value, Option<u32>), StockError> {
        let after = self.cfg.timeouts.response + self.cfg.replica_ack.unwrap_or_default();
        match tokio::time::timeout(after, self.batcher.call(&self.conn, shard, cmd)).await {
            Ok(r) => r.map_err(|source| StockError::Redis { op, source }),
            Err(_) => Err(StockError::Timeout { op, after }),
        }
    }

    /// Runs `script` (its keys and args built by `args`) with `shard`'s next batch.
    /// NOSCRIPT (a flushed or restarted Redis) means the script did not run: load it and
    /// send the same call once more, both within one more response timeout.
    async fn script_batched(
        &self,
        op: &'static str,
        shard: ShardId,
        script: &redis::Script,
        args: impl Fn(&mut redis::Cmd),
    ) -> Result<(Reply, Option<u32>), StockError> {
        let call = || {
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(script.get_hash());
            args(&mut cmd);
            self.batched(op, shard, cmd)
        };
        let (value, acked) = match call().await {
            Err(StockError::Redis { source, .. })
                if source.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
            {
                let after = self.cfg.timeouts.response;
                let retry = async {
                    let mut conn = self.conn.clone();
                    script
                        .load_async(&mut conn)
                        .await
                        .map_err(|source| StockError::Redis {
                            op: "script load",
                            source,
                        })?;
                    call().await
                };
                tokio::time::timeout(after, retry)
                    .await
                    .unwrap_or(Err(StockError::Timeout { op, after }))?
            }
            r => r?,
        };
        Ok((Reply::parse(op, value)?, acked))
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

    /// Loads every script ahead of traffic, so readiness means "scripts loaded".
    pub async fn load_scripts(&self) -> Result<(), StockError> {
        for s in scripts::all() {
            let mut conn = self.conn.clone();
            self.bounded("script load", s.load_async(&mut conn)).await?;
        }
        Ok(())
    }

    pub(crate) fn keys(&self, shard: ShardId, sku: u64) -> ShardKeys {
        ShardKeys::new(&self.placement, shard, sku)
    }

    /// Splits `meta.stock` over the SKU's shards and writes the SKU metadata. A shard whose
    /// slice already exists keeps it (reported as `Live`): preheat never overwrites sales.
    pub async fn preheat(
        &self,
        meta: &SkuMeta,
    ) -> Result<Vec<(ShardId, PreheatOutcome)>, StockError> {
        self.placement
            .check_width(meta.width)
            .map_err(|e| StockError::InvalidArgument(e.to_string()))?;
        if meta.limit == 0 || meta.end_ms <= meta.start_ms {
            return Err(StockError::InvalidArgument(
                "limit must be >= 1 and the window must not be empty".into(),
            ));
        }
        let shards = self.placement.shards_of(meta.sku, meta.width);
        let mut out = Vec::with_capacity(shards.len());
        for (shard, slice) in shards.into_iter().zip(meta.slices()) {
            let k = self.keys(shard, meta.sku);
            let mut inv = scripts::PREHEAT.prepare_invoke();
            inv.key(k.stock())
                .key(k.meta())
                .arg(slice)
                .arg(meta.limit)
                .arg(meta.start_ms)
                .arg(meta.end_ms);
            let r = self.run("preheat", &inv).await?;
            out.push((
                shard,
                match r.code {
                    code::PREHEATED => PreheatOutcome::Preheated { slice: r.int(0)? },
                    code::LIVE => PreheatOutcome::Live { current: r.int(0)? },
                    code::REBUILDING => PreheatOutcome::Rebuilding,
                    _ => return Err(r.unexpected()),
                },
            ));
        }
        // Written after the slices: a gateway that sees the metadata finds the slices too.
        self.write_sku_meta(meta).await?;
        Ok(out)
    }

    /// The SKU-wide metadata hash and the SKU set entry gateways resync from.
    pub async fn write_sku_meta(&self, meta: &SkuMeta) -> Result<(), StockError> {
        let mut conn = self.conn.clone();
        let fields = [
            ("stock", meta.stock.to_string()),
            ("width", meta.width.to_string()),
            ("limit", meta.limit.to_string()),
            ("start", meta.start_ms.to_string()),
            ("end", meta.end_ms.to_string()),
        ];
        self.bounded(
            "preheat meta",
            conn.hset_multiple::<_, _, _, ()>(keys::sku_meta(meta.sku), &fields),
        )
        .await?;
        self.bounded(
            "preheat meta",
            conn.sadd::<_, _, ()>(keys::SKU_SET, meta.sku),
        )
        .await?;
        // Gateways answer SKUs outside their copy of SKU_SET with 404 from memory; this
        // tells them at once (a gateway that misses it rereads the set on resubscribe).
        self.bounded(
            "preheat meta",
            conn.publish::<_, _, ()>(keys::EVENTS_CHANNEL, format!("live {}", meta.sku)),
        )
        .await
    }

    /// The SKU metadata written at preheat, or `None` when the SKU was never preheated.
    pub async fn sku_meta(&self, sku: u64) -> Result<Option<SkuMeta>, StockError> {
        let mut conn = self.conn.clone();
        let vals: Vec<Option<i64>> = self
            .bounded(
                "sku meta",
                redis::cmd("HMGET")
                    .arg(keys::sku_meta(sku))
                    .arg(&["stock", "width", "limit", "start", "end"])
                    .query_async(&mut conn),
            )
            .await?;
        let [Some(stock), Some(width), Some(limit), Some(start), Some(end)] = vals[..] else {
            return Ok(None);
        };
        let bad = || StockError::Protocol {
            op: "sku meta",
            detail: format!("sku {sku}: metadata out of range"),
        };
        let meta = SkuMeta {
            sku,
            stock: u64::try_from(stock).map_err(|_| bad())?,
            width: u16::try_from(width).map_err(|_| bad())?,
            limit: u32::try_from(limit).map_err(|_| bad())?,
            start_ms: start,
            end_ms: end,
        };
        self.placement.check_width(meta.width).map_err(|_| bad())?;
        Ok(Some(meta))
    }

    /// Every preheated SKU id.
    pub async fn skus(&self) -> Result<Vec<u64>, StockError> {
        let mut conn = self.conn.clone();
        self.bounded("skus", conn.smembers(keys::SKU_SET)).await
    }

    /// Each shard's slice of a SKU; `None` where the slice is missing.
    pub async fn slices(
        &self,
        sku: u64,
        width: u16,
    ) -> Result<Vec<(ShardId, Option<i64>)>, StockError> {
        let mut out = Vec::new();
        for shard in self.placement.shards_of(sku, width) {
            let mut conn = self.conn.clone();
            let v: Option<i64> = self
                .bounded("slices", conn.get(self.keys(shard, sku).stock()))
                .await?;
            out.push((shard, v));
        }
        Ok(out)
    }

    /// Runs `claim.lua` on the user's home shard. `allow_hold` says whether a hold may be
    /// placed (false when no other shard is left to try).
    pub async fn claim_home(
        &self,
        req: &ClaimRequest,
        home: ShardId,
        now_ms: i64,
        allow_hold: bool,
    ) -> Result<HomeOutcome, StockError> {
        Ok(self
            .claim_home_acked(req, home, now_ms, allow_hold)
            .await?
            .0)
    }

    /// [`Self::claim_home`], with what the batch's WAIT counted (replica durability).
    pub(crate) async fn claim_home_acked(
        &self,
        req: &ClaimRequest,
        home: ShardId,
        now_ms: i64,
        allow_hold: bool,
    ) -> Result<(HomeOutcome, Option<u32>), StockError> {
        let k = self.keys(home, req.sku);
        let rid = req.request_id.as_deref();
        let hold_ttl = if allow_hold {
            self.cfg.hold_ttl.as_millis() as u64
        } else {
            0
        };
        let request_ttl = self.cfg.request_ttl.as_secs().max(1);
        let (r, acked) = self
            .script_batched("claim", home, &scripts::CLAIM, |cmd| {
                cmd.arg(7)
                    .arg(k.stock())
                    .arg(k.meta())
                    .arg(k.users())
                    .arg(k.user_seq())
                    .arg(k.holds())
                    .arg(keys::claims_stream(&self.placement, home))
                    .arg(k.request(&req.user, rid))
                    .arg(req.sku)
                    .arg(&req.user)
                    .arg(req.qty)
                    .arg(now_ms)
                    .arg(rid.unwrap_or(""))
                    .arg(home)
                    .arg(hold_ttl)
                    .arg(request_ttl)
                    .arg(keys::EVENTS_CHANNEL);
            })
            .await?;
        let outcome = match r.code {
            code::CLAIMED => HomeOutcome::Claimed {
                claim_id: r.text(0)?,
                user_seq: r.int(1)? as u64,
                remaining: r.int(2)?,
            },
            code::REPLAY => HomeOutcome::Replay(Claim {
                claim_id: r.text(0)?,
                sku: req.sku,
                shard: r.int(1)? as u16,
                qty: r.int(2)? as u32,
            }),
            code::HOLD => HomeOutcome::Hold {
                user_seq: r.int(0)? as u64,
                remaining: r.int(1)?,
            },
            code::IN_PROGRESS => HomeOutcome::InProgress,
            code::SOLD_OUT => HomeOutcome::SoldOut {
                remaining: r.int(0)?,
            },
            code::LIMIT => HomeOutcome::LimitReached {
                held: r.int(0)? as u32,
            },
            code::NOT_STARTED => HomeOutcome::NotStarted,
            code::ENDED => HomeOutcome::Ended,
            code::NOT_PREHEATED => HomeOutcome::NotPreheated,
            code::BAD_ARGUMENT => {
                return Err(StockError::InvalidArgument("claim: qty or time".into()))
            }
            _ => return Err(r.unexpected()),
        };
        Ok((outcome, acked))
    }

    /// Runs `take.lua` (the second chance) on `shard`, under the hold `user_seq` on `home`.
    pub async fn take(
        &self,
        req: &ClaimRequest,
        shard: ShardId,
        home: ShardId,
        user_seq: u64,
        now_ms: i64,
    ) -> Result<TakeOutcome, StockError> {
        Ok(self.take_acked(req, shard, home, user_seq, now_ms).await?.0)
    }

    /// [`Self::take`], with what the batch's WAIT counted (replica durability).
    pub(crate) async fn take_acked(
        &self,
        req: &ClaimRequest,
        shard: ShardId,
        home: ShardId,
        user_seq: u64,
        now_ms: i64,
    ) -> Result<(TakeOutcome, Option<u32>), StockError> {
        let k = self.keys(shard, req.sku);
        // The hold placed at `now_ms` expires at `now_ms + hold_ttl`; a third of the TTL
        // is the margin for clock skew between Redis and the consumer that resolves it.
        let hold_ttl = self.cfg.hold_ttl.as_millis() as i64;
        let deadline = now_ms + hold_ttl - hold_ttl / 3;
        let (r, acked) = self
            .script_batched("take", shard, &scripts::TAKE, |cmd| {
                cmd.arg(3)
                    .arg(k.stock())
                    .arg(k.meta())
                    .arg(keys::claims_stream(&self.placement, shard))
                    .arg(req.sku)
                    .arg(&req.user)
                    .arg(req.qty)
                    .arg(now_ms)
                    .arg(user_seq)
                    .arg(home)
                    .arg(req.request_id.as_deref().unwrap_or(""))
                    .arg(shard)
                    .arg(keys::EVENTS_CHANNEL)
                    .arg(deadline);
            })
            .await?;
        let outcome = match r.code {
            code::CLAIMED => TakeOutcome::Claimed {
                claim_id: r.text(0)?,
                remaining: r.int(1)?,
            },
            code::SOLD_OUT => TakeOutcome::SoldOut {
                remaining: r.int(0)?,
            },
            code::NOT_STARTED => TakeOutcome::NotStarted,
            code::ENDED => TakeOutcome::Ended,
            code::NOT_PREHEATED => TakeOutcome::NotPreheated,
            code::HOLD_EXPIRED => TakeOutcome::HoldExpired,
            code::BAD_ARGUMENT => {
                return Err(StockError::InvalidArgument("take: qty or time".into()))
            }
            _ => return Err(r.unexpected()),
        };
        Ok((outcome, acked))
    }

    /// Runs `settle.lua` on the home shard: ends the hold `user_seq` of `user`.
    pub async fn settle(
        &self,
        sku: u64,
        home: ShardId,
        user: &str,
        user_seq: u64,
        request_id: Option<&str>,
        how: &Settlement,
    ) -> Result<SettleOutcome, StockError> {
        Ok(self
            .settle_acked(sku, home, user, user_seq, request_id, how)
            .await?
            .0)
    }

    /// [`Self::settle`], with what the batch's WAIT counted (replica durability).
    pub(crate) async fn settle_acked(
        &self,
        sku: u64,
        home: ShardId,
        user: &str,
        user_seq: u64,
        request_id: Option<&str>,
        how: &Settlement,
    ) -> Result<(SettleOutcome, Option<u32>), StockError> {
        let k = self.keys(home, sku);
        let (verb, answer) = match how {
            // With replica durability, a reroute's answer is tentative until its take is
            // known to be on a replica of its own shard (see `replay.rs`).
            Settlement::Keep(c) => (
                "keep",
                crate::replay::answer(c, self.cfg.replica_ack.is_some() && c.shard != home),
            ),
            Settlement::Undo => ("undo", String::new()),
        };
        let (r, acked) = self
            .script_batched("settle", home, &scripts::SETTLE, |cmd| {
                cmd.arg(3)
                    .arg(k.users())
                    .arg(k.holds())
                    .arg(k.request(user, request_id))
                    .arg(user)
                    .arg(user_seq)
                    .arg(verb)
                    .arg(request_id.unwrap_or(""))
                    .arg(&answer)
                    .arg(self.cfg.request_ttl.as_secs().max(1));
            })
            .await?;
        let outcome = match r.code {
            code::SETTLED => SettleOutcome::Settled {
                qty: r.int(0)? as u32,
            },
            code::HOLD_GONE => SettleOutcome::HoldGone,
            _ => return Err(r.unexpected()),
        };
        Ok((outcome, acked))
    }

    /// Holds standing on a shard for a SKU.
    pub async fn holds(&self, sku: u64, shard: ShardId) -> Result<Vec<Hold>, StockError> {
        let mut conn = self.conn.clone();
        let raw: Vec<(String, String)> = self
            .bounded("holds", conn.hgetall(self.keys(shard, sku).holds()))
            .await?;
        Ok(raw
            .into_iter()
            .filter_map(|(field, value)| {
                let (user, seq) = field.rsplit_once('|')?;
                let mut parts = value.splitn(3, '|');
                let (qty, exp, rid) = (parts.next()?, parts.next()?, parts.next().unwrap_or(""));
                Some(Hold {
                    sku,
                    home: shard,
                    user: user.to_owned(),
                    user_seq: seq.parse().ok()?,
                    qty: qty.parse().ok()?,
                    expires_ms: exp.parse().ok()?,
                    request_id: (!rid.is_empty()).then(|| rid.to_owned()),
                })
            })
            .collect())
    }

    /// Returns a claim's units to its slice and to the user's count, each exactly once.
    pub async fn release(&self, rel: &ReleaseRequest) -> Result<ReleaseOutcome, StockError> {
        let ks = self.keys(rel.shard, rel.sku);
        let mut inv = scripts::RELEASE_STOCK.prepare_invoke();
        inv.key(ks.stock())
            .key(ks.released_stock())
            .arg(&rel.claim_id)
            .arg(rel.qty)
            .arg(rel.sku)
            .arg(rel.shard)
            .arg(keys::EVENTS_CHANNEL);
        let stock = release_step(self.run("release stock", &inv).await?)?;
        if stock == ReleaseStep::NotPreheated {
            // The slice is gone (Redis lost it): leave the user's count alone too, so a
            // retry after re-preheat does both halves.
            return Ok(ReleaseOutcome {
                stock,
                user: ReleaseStep::NotPreheated,
            });
        }
        let kh = self.keys(rel.home, rel.sku);
        let mut inv = scripts::RELEASE_USER.prepare_invoke();
        inv.key(kh.users())
            .key(kh.released_user())
            .key(kh.meta())
            .arg(&rel.claim_id)
            .arg(&rel.user)
            .arg(rel.qty);
        let user = release_step(self.run("release user", &inv).await?)?;
        Ok(ReleaseOutcome { stock, user })
    }

    /// Units the user holds of a SKU (holds included), read from the home shard.
    pub async fn user_count(&self, sku: u64, width: u16, user: &str) -> Result<u32, StockError> {
        let home = self.placement.home_shard(sku, width, user);
        let mut conn = self.conn.clone();
        let v: Option<u32> = self
            .bounded("user count", conn.hget(self.keys(home, sku).users(), user))
            .await?;
        Ok(v.unwrap_or(0))
    }
}

fn release_step(r: Reply) -> Result<ReleaseStep, StockError> {
    match r.code {
        code::RELEASED => Ok(ReleaseStep::Released),
        code::ALREADY_RELEASED => Ok(ReleaseStep::AlreadyReleased),
        code::NOT_PREHEATED => Ok(ReleaseStep::NotPreheated),
        _ => Err(r.unexpected()),
    }
}

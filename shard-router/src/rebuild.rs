//! The Redis half of a rebuild from the ledger: the typed calls of `lua/rebuild_fence.lua`,
//! `lua/rebuild_renew.lua`, `lua/rebuild.lua` and `lua/rebuild_late.lua`, and the replay
//! answers written while the fence is up. What to
//! write is computed by the consumer from the ledger (`campaign-ops/src/rebuild.rs`); this file
//! only knows the keys and the script codes.

use std::time::Duration;

use crate::client::StockClient;
use crate::codec::EntryId;
use crate::error::StockError;
use crate::keys;
use crate::outcome::SkuMeta;
use crate::placement::ShardId;
use crate::record::ClaimRecord;
use crate::scripts::{self, code};

/// Outcome of putting up a rebuild fence on one shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FenceOutcome {
    /// The fence is up; `previous` is the slice it removed (`None`: it was missing).
    Fenced { previous: Option<i64> },
    /// Another rebuild holds the shard until `expires_ms` (Redis clock).
    Busy { holder: String, expires_ms: i64 },
}

/// Everything one shard gets back from the ledger.
#[derive(Debug, Clone, Default)]
pub struct ShardImage {
    pub shard: ShardId,
    /// Units left on this slice.
    pub slice: i64,
    /// Units the ledger counts sold beyond this shard's share (an oversell that already
    /// happened): the shard's debt, paid before the slice grows again. 0 when `slice > 0`.
    pub debt: u64,
    /// Per user homed here: units held in active claims and the highest user_seq seen.
    pub users: Vec<(String, u64, u64)>,
    /// `user|seq` of holds on this shard whose claim the rebuild already counted.
    pub matched_holds: Vec<String>,
    /// Claim ids whose units are back on this slice (released or being released).
    pub released_stock: Vec<String>,
    /// Claim ids whose units are back in this home shard's user counts.
    pub released_user: Vec<String>,
    /// The highest entry id of a claim the ledger holds from this shard's claims stream:
    /// the stream's last id is raised to it, so a stream Redis lost (or rolled back) never
    /// hands out a claim id the ledger already holds (its insert would be taken for a
    /// duplicate and the new claim dropped).
    pub stream_floor: Option<EntryId>,
}

/// What counting a late claim did on one shard (`lua/rebuild_late.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LateOutcome {
    /// Counted now; `short` units were missing from the slice (sold twice: an oversell).
    Applied { short: u64 },
    /// Counted before on this shard; `short` as that first apply found it (so a retry
    /// after a crash can still record the oversell).
    Already { short: u64 },
    /// A newer rebuild counted it from the ledger: nothing to do.
    Stale,
    /// The shard is not (yet) written back by the rebuild the claim was judged against.
    Wait,
}

/// A replay answer to store on a user's home shard.
#[derive(Debug, Clone)]
pub struct ReplayAnswer {
    pub home: ShardId,
    pub user: String,
    pub request_id: String,
    pub claim_id: String,
    pub shard: ShardId,
    pub qty: u32,
    /// How long the answer is still kept (the request TTL minus the claim's age).
    pub ttl: Duration,
}

impl StockClient {
    /// The rebuild fence on `shard`, if any: its token and lease expiry (Redis ms).
    pub async fn rebuild_fence(
        &self,
        sku: u64,
        shard: ShardId,
    ) -> Result<Option<(String, i64)>, StockError> {
        let mut conn = self.conn();
        let v: Option<String> = self
            .bounded(
                "rebuild fence",
                redis::cmd("HGET")
                    .arg(self.keys(shard, sku).meta())
                    .arg("rebuild")
                    .query_async(&mut conn),
            )
            .await?;
        Ok(v.and_then(|v| {
            let (token, exp) = v.rsplit_once('|')?;
            Some((token.to_owned(), exp.parse().ok()?))
        }))
    }

    /// The rebuild generation `shard` carries for `sku` (its meta's `gen`, 0 when never
    /// rebuilt), `None` when the meta is missing.
    pub async fn rebuild_gen(&self, sku: u64, shard: ShardId) -> Result<Option<u64>, StockError> {
        let mut conn = self.conn();
        let (limit, gen): (Option<String>, Option<u64>) = self
            .bounded(
                "rebuild gen",
                redis::cmd("HMGET")
                    .arg(self.keys(shard, sku).meta())
                    .arg("limit")
                    .arg("gen")
                    .query_async(&mut conn),
            )
            .await?;
        Ok(limit.map(|_| gen.unwrap_or(0)))
    }

    /// Puts up the rebuild fence of `token` on `shard` for `lease`.
    pub async fn fence_rebuild(
        &self,
        sku: u64,
        shard: ShardId,
        token: &str,
        lease: Duration,
    ) -> Result<FenceOutcome, StockError> {
        let k = self.keys(shard, sku);
        let mut inv = scripts::REBUILD_FENCE.prepare_invoke();
        inv.key(k.stock())
            .key(k.meta())
            .arg(token)
            .arg(lease.as_millis().max(1) as u64);
        let r = self.run("rebuild fence", &inv).await?;
        match r.code {
            code::FENCED => {
                let v = r.int(0)?;
                Ok(FenceOutcome::Fenced {
                    previous: (v >= 0).then_some(v),
                })
            }
            code::BUSY => Ok(FenceOutcome::Busy {
                holder: r.text(0)?,
                expires_ms: r.int(1)?,
            }),
            code::BAD_ARGUMENT => Err(StockError::InvalidArgument(
                "rebuild fence: empty token, '|' in it, or no lease".into(),
            )),
            _ => Err(r.unexpected()),
        }
    }

    /// Extends the lease of `token`'s fence on `shard` without touching the slice. False
    /// when `token` no longer holds it (taken over, or already written back).
    pub async fn renew_rebuild(
        &self,
        sku: u64,
        shard: ShardId,
        token: &str,
        lease: Duration,
    ) -> Result<bool, StockError> {
        let mut inv = scripts::REBUILD_RENEW.prepare_invoke();
        inv.key(self.keys(shard, sku).meta())
            .arg(token)
            .arg(lease.as_millis().max(1) as u64);
        let r = self.run("rebuild renew", &inv).await?;
        match r.code {
            code::FENCED => Ok(true),
            code::FENCE_LOST => Ok(false),
            code::BAD_ARGUMENT => Err(StockError::InvalidArgument(
                "rebuild renew: empty token, '|' in it, or no lease".into(),
            )),
            _ => Err(r.unexpected()),
        }
    }

    /// Counts the late claim `record`, judged against rebuild generation `gen`, on `shard`:
    /// its units off the slice when `shard` is the claim's shard, its user count, sequence
    /// and replay answer when `shard` is its home.
    pub async fn apply_late(
        &self,
        record: &ClaimRecord,
        gen: u64,
        shard: ShardId,
    ) -> Result<LateOutcome, StockError> {
        let k = self.keys(shard, record.sku);
        let home = shard == record.home;
        let rid = record.request_id.as_deref().filter(|_| home);
        let mut inv = scripts::REBUILD_LATE.prepare_invoke();
        inv.key(k.stock())
            .key(k.meta())
            .key(k.users())
            .key(k.user_seq())
            .key(k.holds())
            .key(k.request(&record.user, rid))
            .key(k.debt())
            .key(k.fix_epoch())
            .arg(&record.claim_id)
            .arg(gen)
            .arg(record.qty)
            .arg(if shard == record.shard { "1" } else { "0" })
            .arg(if home { record.user.as_str() } else { "" })
            .arg(record.user_seq)
            .arg(match rid {
                Some(_) => format!("{}|{}|{}", record.claim_id, record.shard, record.qty),
                None => String::new(),
            })
            .arg(self.config().request_ttl.as_secs().max(1))
            .arg(keys::EVENTS_CHANNEL)
            .arg(record.sku)
            .arg(shard)
            .arg(record.request_id.as_deref().unwrap_or(""))
            .arg(record.gen);
        let r = self.run("rebuild late", &inv).await?;
        match r.code {
            code::LATE_APPLIED => Ok(LateOutcome::Applied { short: r.num(0)? }),
            code::LATE_ALREADY => Ok(LateOutcome::Already { short: r.num(0)? }),
            code::LATE_STALE => Ok(LateOutcome::Stale),
            code::LATE_WAIT => Ok(LateOutcome::Wait),
            code::BAD_ARGUMENT => Err(StockError::InvalidArgument(
                "rebuild late: bad generation, qty or seq".into(),
            )),
            _ => Err(r.unexpected()),
        }
    }

    /// Stores replay answers (`claim_id|shard|qty`, as claim.lua and settle.lua write them)
    /// under their request ids. Run while the fence is up, so no claim reads them early.
    pub async fn store_answers(
        &self,
        sku: u64,
        answers: &[ReplayAnswer],
    ) -> Result<(), StockError> {
        for chunk in answers.chunks(500) {
            // One pipeline per home shard: every key of it shares that shard's slot.
            let mut by_home: std::collections::BTreeMap<ShardId, redis::Pipeline> =
                Default::default();
            for a in chunk {
                let key = self.keys(a.home, sku).request(&a.user, Some(&a.request_id));
                by_home
                    .entry(a.home)
                    .or_insert_with(redis::pipe)
                    .cmd("SET")
                    .arg(key)
                    .arg(format!("{}|{}|{}", a.claim_id, a.shard, a.qty))
                    .arg("EX")
                    .arg(a.ttl.as_secs().max(1))
                    .ignore();
            }
            for pipe in by_home.values() {
                let mut conn = self.conn();
                self.bounded("rebuild answers", pipe.query_async::<()>(&mut conn))
                    .await?;
            }
        }
        Ok(())
    }

    /// Writes `image` to its shard and lifts the fence of `token`, atomically. False when
    /// the fence was taken over by another rebuild (nothing was written). The shard's wave
    /// hash is reset to `applied_waves` (the ledger's applied stock waves); `gen` is the
    /// rebuild generation the claim scripts copy into their records from then on.
    pub async fn write_rebuild(
        &self,
        meta: &SkuMeta,
        token: &str,
        image: &ShardImage,
        applied_waves: &[String],
        gen: u64,
    ) -> Result<bool, StockError> {
        let k = self.keys(image.shard, meta.sku);
        let mut inv = scripts::REBUILD.prepare_invoke();
        inv.key(k.stock())
            .key(k.meta())
            .key(k.users())
            .key(k.user_seq())
            .key(k.holds())
            .key(k.released_stock())
            .key(k.released_user())
            .key(k.waves())
            .key(k.fix_epoch())
            .key(k.debt())
            .key(keys::claims_stream(self.placement(), image.shard))
            .arg(token)
            .arg(image.slice)
            .arg(meta.limit)
            .arg(meta.start_ms)
            .arg(meta.end_ms)
            .arg(meta.sku)
            .arg(image.shard)
            .arg(keys::EVENTS_CHANNEL)
            .arg(gen)
            .arg(image.debt)
            .arg(
                image
                    .stream_floor
                    .map_or(String::new(), |(ms, seq)| format!("{ms}-{seq}")),
            )
            .arg(image.users.len());
        for (user, units, seq) in &image.users {
            inv.arg(user).arg(units).arg(seq);
        }
        inv.arg(image.matched_holds.len());
        for h in &image.matched_holds {
            inv.arg(h);
        }
        inv.arg(image.released_stock.len());
        for id in &image.released_stock {
            inv.arg(id);
        }
        inv.arg(image.released_user.len());
        for id in &image.released_user {
            inv.arg(id);
        }
        inv.arg(applied_waves.len());
        for id in applied_waves {
            inv.arg(id);
        }
        let r = self.run("rebuild", &inv).await?;
        match r.code {
            code::REBUILT => Ok(true),
            code::FENCE_LOST => Ok(false),
            code::BAD_ARGUMENT => Err(StockError::InvalidArgument(
                "rebuild: negative slice or debt, both above 0, or bad campaign fields".into(),
            )),
            _ => Err(r.unexpected()),
        }
    }
}

//! The claim steps on one shard, each a Lua script in a group-commit batch: the claim on
//! the home shard (or its hold), the take on another shard, and the settle of the hold.
//! Each answers its outcome with what replica durability confirmed of its batch
//! ([`Acked`]): the claim protocol needs both.

use super::StockClient;
use crate::error::StockError;
use crate::guard::Selling;
use crate::keys;
use crate::outcome::Acked;
use crate::outcome::*;
use crate::placement::ShardId;
use crate::scripts::code;

impl StockClient {
    /// Runs `claim.lua` on the user's home shard. `allow_hold` says whether a hold may be
    /// placed (false when no other shard is left to try).
    pub async fn claim_home(
        &self,
        req: &ClaimRequest,
        home: ShardId,
        now_ms: i64,
        allow_hold: bool,
    ) -> Result<Acked<HomeOutcome>, StockError> {
        let k = self.keys(home, req.sku);
        let rid = req.request_id.as_deref();
        let hold_ttl = if allow_hold {
            self.cfg.hold_ttl.as_millis() as u64
        } else {
            0
        };
        let request_ttl = self.cfg.request_ttl.as_secs().max(1);
        let (r, confirmation) = self
            .script_batched("claim", home, Selling::Claim, |cmd| {
                // The request's key and arguments only with a request id (lua/claim.lua).
                cmd.arg(if rid.is_some() { 7 } else { 6 })
                    .arg(k.stock())
                    .arg(k.meta())
                    .arg(k.users())
                    .arg(k.user_seq())
                    .arg(k.holds())
                    .arg(keys::claims_stream(&self.placement, home));
                if let Some(rid) = rid {
                    cmd.arg(k.request(&req.user, Some(rid)));
                }
                cmd.arg(req.sku)
                    .arg(&req.user)
                    .arg(req.qty)
                    .arg(now_ms)
                    .arg(home)
                    .arg(hold_ttl);
                if let Some(rid) = rid {
                    cmd.arg(rid).arg(request_ttl);
                }
            })
            .await?;
        let outcome = match r.code {
            code::CLAIMED => HomeOutcome::Claimed {
                claim_id: r.text(0)?,
                user_seq: r.num(1)?,
                remaining: r.int(2)?,
            },
            code::REPLAY => HomeOutcome::Replay(Claim {
                claim_id: r.text(0)?,
                sku: req.sku,
                shard: r.num(1)?,
                qty: r.num(2)?,
            }),
            code::HOLD => HomeOutcome::Hold {
                user_seq: r.num(0)?,
                remaining: r.int(1)?,
                gen: r.num(2)?,
            },
            code::IN_PROGRESS => HomeOutcome::InProgress,
            code::SOLD_OUT => HomeOutcome::SoldOut {
                remaining: r.int(0)?,
            },
            code::LIMIT => HomeOutcome::LimitReached { held: r.num(0)? },
            code::NOT_STARTED => HomeOutcome::NotStarted,
            code::ENDED => HomeOutcome::Ended,
            code::NOT_PREHEATED => HomeOutcome::NotPreheated,
            code::BAD_ARGUMENT => {
                return Err(StockError::InvalidArgument("claim: qty or time".into()))
            }
            _ => return Err(r.unexpected()),
        };
        Ok(Acked {
            outcome,
            confirmation,
        })
    }

    /// Runs `take.lua` (the second chance) on `shard`, under the hold `user_seq` on `home`.
    pub async fn take(
        &self,
        req: &ClaimRequest,
        shard: ShardId,
        home: ShardId,
        user_seq: u64,
        hold_gen: u64,
        now_ms: i64,
    ) -> Result<Acked<TakeOutcome>, StockError> {
        let k = self.keys(shard, req.sku);
        // The hold placed at `now_ms` expires at `now_ms + hold_ttl`; a third of the TTL
        // is the margin for clock skew between Redis and the consumer that resolves it.
        let hold_ttl = self.cfg.hold_ttl.as_millis() as i64;
        let deadline = now_ms + hold_ttl - hold_ttl / 3;
        let (r, confirmation) = self
            .script_batched("take", shard, Selling::Take, |cmd| {
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
                    .arg(deadline)
                    .arg(hold_gen);
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
        Ok(Acked {
            outcome,
            confirmation,
        })
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
    ) -> Result<Acked<SettleOutcome>, StockError> {
        let k = self.keys(home, sku);
        let mut hold_gen = String::new();
        let (verb, answer) = match how {
            // With replica durability, a reroute's answer is tentative until its take is
            // known to be on a replica of its own shard (see `replay.rs`).
            Settlement::Keep(c) | Settlement::KeepOwn { claim: c, .. } => (
                "keep",
                crate::codec::encode_answer(
                    &c.claim_id,
                    c.shard,
                    c.qty,
                    self.cfg.replica_ack.is_some() && c.shard != home,
                ),
            ),
            Settlement::Undo | Settlement::UndoOwn { .. } => ("undo", String::new()),
        };
        if let Settlement::KeepOwn { gen, .. } | Settlement::UndoOwn { gen } = how {
            hold_gen = gen.to_string();
        }
        let (r, confirmation) = self
            .script_batched("settle", home, Selling::Settle, |cmd| {
                cmd.arg(4)
                    .arg(k.users())
                    .arg(k.holds())
                    .arg(k.request(user, request_id))
                    .arg(k.meta())
                    .arg(user)
                    .arg(user_seq)
                    .arg(verb)
                    .arg(request_id.unwrap_or(""))
                    .arg(&answer)
                    .arg(self.cfg.request_ttl.as_secs().max(1))
                    .arg(&hold_gen);
            })
            .await?;
        let outcome = match r.code {
            code::SETTLED => SettleOutcome::Settled { qty: r.num(0)? },
            code::HOLD_GONE => SettleOutcome::HoldGone,
            _ => return Err(r.unexpected()),
        };
        Ok(Acked {
            outcome,
            confirmation,
        })
    }
}

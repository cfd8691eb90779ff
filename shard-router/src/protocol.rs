//! The full claim protocol over the typed calls: claim on the home shard; when its slice
//! is short, hold the user's count, walk the other shards (second chance), then settle the
//! hold. Knowledge of empty shards comes from an [`EmptyShards`] view (the gateway's
//! sold-out cache) and is corrected by every outcome seen here.

use std::collections::HashSet;
use std::sync::Mutex;

use crate::client::StockClient;
use crate::error::StockError;
use crate::outcome::*;
// Also here, beside the claim that answers them.
pub use crate::outcome::{Acked, Confirmation};
use crate::placement::{ShardId, Walkable};

/// What a caller knows about empty slices. The gateway backs this with its moka cache;
/// [`LocalEmptyShards`] is a plain in-process set.
pub trait EmptyShards: Send + Sync {
    /// Whether `shard` is known empty, when a claim plans its walk (every claim, right
    /// after the caller looked the SKU up).
    fn is_empty(&self, sku: u64, shard: ShardId) -> bool;
    fn set_empty(&self, sku: u64, shard: ShardId, empty: bool);

    /// Whether `shard` is known empty now, as the walk reaches it (a claim that holds, a
    /// Redis round trip or more after it planned): a view whose knowledge can go stale in
    /// between answers from where it is kept fresh.
    fn still_empty(&self, sku: u64, shard: ShardId) -> bool {
        self.is_empty(sku, shard)
    }
}

/// An in-process set of empty `(sku, shard)` pairs.
#[derive(Debug, Default)]
pub struct LocalEmptyShards(Mutex<HashSet<(u64, ShardId)>>);

impl EmptyShards for LocalEmptyShards {
    fn is_empty(&self, sku: u64, shard: ShardId) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&(sku, shard))
    }

    fn set_empty(&self, sku: u64, shard: ShardId, empty: bool) {
        let mut set = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if empty {
            set.insert((sku, shard));
        } else {
            set.remove(&(sku, shard));
        }
    }
}

/// How a claim runs: what the caller knows about empty slices, the gateway clock passed to
/// the scripts, and whether a short home slice walks the other shards.
#[derive(Clone, Copy)]
pub struct ClaimOptions<'a> {
    pub empties: &'a dyn EmptyShards,
    pub now_ms: i64,
    /// `false` is the ablation that shows what rerouting buys (a claim whose home slice is
    /// empty is sold out).
    pub second_chance: bool,
}

impl<'a> ClaimOptions<'a> {
    /// The full protocol, second chance included.
    pub fn new(empties: &'a dyn EmptyShards, now_ms: i64) -> Self {
        Self {
            empties,
            now_ms,
            second_chance: true,
        }
    }

    /// Sets whether a short home slice walks the other shards.
    pub fn second_chance(self, second_chance: bool) -> Self {
        Self {
            second_chance,
            ..self
        }
    }
}

/// Runs one claim end to end: its outcome, and what replica durability confirmed (the
/// gateway's answer is [`crate::decision::decide`]'s). Errors are Redis trouble; an
/// ambiguous error during a second chance leaves the hold standing, for the consumer to
/// resolve against the ledger.
///
/// A rerouted claim writes on two shards: the units and record on the other shard, the
/// user's count, sequence and stored answer on the home shard. Its hold must be confirmed
/// before the take, so that a retry after the home master's failover finds the hold (and
/// waits for it to be resolved against the ledger) instead of claiming a second time; the
/// take and the settle must both be confirmed for the claim to be.
pub async fn claim(
    client: &StockClient,
    meta: &SkuMeta,
    req: &ClaimRequest,
    opts: ClaimOptions<'_>,
) -> Result<Acked<ClaimOutcome>, StockError> {
    req.validate()?;
    if req.sku != meta.sku {
        return Err(StockError::InvalidArgument(
            "request and metadata SKUs differ".into(),
        ));
    }
    let placement = client.placement();
    let home = placement.home_shard(meta.sku, meta.width, &req.user);
    // The shards the walk may visit, not yet its order: most claims end at home.
    let walkable = if opts.second_chance {
        placement.walkable(meta.sku, meta.width, home, |s| {
            opts.empties.is_empty(meta.sku, s)
        })
    } else {
        Walkable::default()
    };
    let at_home = client
        .claim_home(req, home, opts.now_ms, !walkable.is_empty())
        .await?;
    let (user_seq, gen) = match at_home.outcome.end(opts.empties, meta, req, home) {
        Ok(end) => {
            return Ok(Acked {
                outcome: end,
                confirmation: at_home.confirmation,
            })
        }
        Err(held) => held,
    };
    let hold = Hold {
        client,
        meta,
        req,
        home,
        user_seq,
        gen,
    };
    if at_home.confirmation == Confirmation::Unconfirmed {
        // A take under a hold the home replica may not have: after a failover of the home
        // master, a retry would find no hold and claim again. Give the count back and take
        // nothing (if the undo is lost too, the consumer resolves the hold: no claim).
        hold.undo_or_leave("of an unconfirmed hold").await;
        return Err(StockError::Unconfirmed { op: "hold" });
    }
    let others =
        placement.second_chances(meta.sku, meta.width, &req.user, |s| !walkable.contains(s));
    take_elsewhere(&hold, others, opts).await
}

impl HomeOutcome {
    /// The claim's outcome when the home shard decided it, else `Err` with the hold it
    /// placed (`user_seq`, generation). Notes what the shard said of its slice.
    fn end(
        self,
        empties: &dyn EmptyShards,
        meta: &SkuMeta,
        req: &ClaimRequest,
        home: ShardId,
    ) -> Result<ClaimOutcome, (u64, u64)> {
        Ok(match self {
            HomeOutcome::Claimed {
                claim_id,
                remaining,
                ..
            } => {
                note_remaining(empties, meta.sku, home, remaining);
                ClaimOutcome::Claimed {
                    claim: Claim {
                        claim_id,
                        sku: meta.sku,
                        shard: home,
                        qty: req.qty,
                    },
                    rerouted: false,
                }
            }
            HomeOutcome::Hold {
                user_seq,
                remaining,
                gen,
            } => {
                note_remaining(empties, meta.sku, home, remaining);
                return Err((user_seq, gen));
            }
            HomeOutcome::SoldOut { remaining } => {
                note_remaining(empties, meta.sku, home, remaining);
                ClaimOutcome::SoldOut
            }
            HomeOutcome::Replay(c) => ClaimOutcome::Replay(c),
            HomeOutcome::InProgress => ClaimOutcome::InProgress,
            HomeOutcome::LimitReached { held } => ClaimOutcome::LimitReached { held },
            HomeOutcome::NotStarted => ClaimOutcome::NotStarted,
            HomeOutcome::Ended => ClaimOutcome::Ended,
            HomeOutcome::NotPreheated => ClaimOutcome::NotPreheated,
        })
    }
}

/// The user's count held on the home shard while other shards are tried: what a settle
/// needs to find it.
#[derive(Clone, Copy)]
struct Hold<'a> {
    client: &'a StockClient,
    meta: &'a SkuMeta,
    req: &'a ClaimRequest,
    home: ShardId,
    user_seq: u64,
    /// The home shard's rebuild generation at the hold: a take refuses an older one, and
    /// the keep and the undo name the hold by it (not a retry's that took the same
    /// `user|seq` after a loss).
    gen: u64,
}

impl Hold<'_> {
    async fn settle(&self, how: &Settlement) -> Result<Acked<SettleOutcome>, StockError> {
        let rid = self.req.request_id.as_deref();
        self.client
            .settle(
                self.meta.sku,
                self.home,
                &self.req.user,
                self.user_seq,
                rid,
                how,
            )
            .await
    }

    /// Gives the user's count back: nothing was taken.
    async fn undo(&self) -> Result<SettleOutcome, StockError> {
        let own = Settlement::UndoOwn { gen: self.gen };
        self.settle(&own).await.map(|settled| settled.outcome)
    }

    /// [`Self::undo`] at once rather than leaving the user blocked until the consumer
    /// resolves the hold; when the undo fails, that is what happens (no claim).
    async fn undo_or_leave(&self, what: &str) {
        if let Err(e) = self.undo().await {
            tracing::warn!(sku = self.meta.sku, user = %self.req.user, error = %e, "undo {what} failed; hold left for the consumer");
        }
    }

    /// Keeps the claim taken on another shard, naming the hold by its generation. The unit
    /// is taken and recorded whatever settle says: a failed settle leaves the hold (count
    /// included) for the consumer, which finds the claim in the ledger and keeps it (or,
    /// refused on a Redis process not vouched for, for the rebuild, which finds the record
    /// in the taking shard's stream). A hold that is gone was settled by someone else, or
    /// after a loss is another claim's hold of the same `user|seq`: the request's answer is
    /// the one stored on the home shard, not this attempt's to give.
    async fn keep(
        &self,
        claim: Claim,
        take: Confirmation,
    ) -> Result<Acked<ClaimOutcome>, StockError> {
        let own = Settlement::KeepOwn {
            claim: claim.clone(),
            gen: self.gen,
        };
        let settled = match self.settle(&own).await {
            Ok(Acked {
                outcome: SettleOutcome::HoldGone,
                ..
            }) => {
                tracing::warn!(sku = self.meta.sku, user = %self.req.user, claim_id = %claim.claim_id, "the hold was settled elsewhere before its keep");
                return Err(StockError::HoldSettled { op: "keep" });
            }
            Ok(Acked { confirmation, .. }) => confirmation,
            Err(e) => {
                tracing::warn!(sku = self.meta.sku, user = %self.req.user, error = %e, "settle keep failed; hold left for the consumer");
                // Nothing confirmed the settle: with replica durability, not the claim either.
                match take {
                    Confirmation::NotAsked => Confirmation::NotAsked,
                    _ => Confirmation::Unconfirmed,
                }
            }
        };
        Ok(Acked {
            outcome: ClaimOutcome::Claimed {
                claim,
                rerouted: true,
            },
            confirmation: take.and(settled),
        })
    }
}

/// Second chance under the hold. Walking every remaining shard (not just one) keeps
/// "stock left but sold out" from happening when this gateway's view is stale; each miss
/// marks the shard empty, so later claims skip it, and so do walks already under way: a
/// shard the view learnt was empty since this walk began (another claim's miss, an `empty`
/// event) is skipped by the same rule that chose the walk's shards. In a rush many claims
/// walk at once, and each take is a Redis round trip behind every other runnable task, so
/// a long walk is slow (docs/BENCHMARKS.md "Where the rush time goes").
async fn take_elsewhere(
    hold: &Hold<'_>,
    others: Vec<ShardId>,
    opts: ClaimOptions<'_>,
) -> Result<Acked<ClaimOutcome>, StockError> {
    let Hold {
        client,
        meta,
        req,
        home,
        user_seq,
        gen,
    } = *hold;
    let mut end = ClaimOutcome::SoldOut;
    for shard in others {
        if opts.empties.still_empty(meta.sku, shard) {
            continue;
        }
        let taken = client
            .take(req, shard, home, user_seq, gen, opts.now_ms)
            .await;
        let taken = match taken {
            Ok(t) => t,
            Err(e) => {
                // A clear failure took nothing: give the count back now. An ambiguous one
                // (timeout, dropped connection) may have taken a unit: the hold stays for
                // the consumer to settle against the ledger.
                if !e.is_ambiguous() {
                    hold.undo_or_leave("after a failed take").await;
                }
                return Err(e);
            }
        };
        match taken.outcome {
            TakeOutcome::Claimed {
                claim_id,
                remaining,
            } => {
                note_remaining(opts.empties, meta.sku, shard, remaining);
                let claim = Claim {
                    claim_id,
                    sku: meta.sku,
                    shard,
                    qty: req.qty,
                };
                return hold.keep(claim, taken.confirmation).await;
            }
            TakeOutcome::SoldOut { remaining } => {
                note_remaining(opts.empties, meta.sku, shard, remaining);
            }
            TakeOutcome::NotStarted => {
                end = ClaimOutcome::NotStarted;
                break;
            }
            TakeOutcome::Ended => {
                end = ClaimOutcome::Ended;
                break;
            }
            TakeOutcome::NotPreheated => {
                end = ClaimOutcome::NotPreheated;
                break;
            }
            TakeOutcome::HoldExpired => {
                hold.undo().await?;
                return Err(StockError::Expired { op: "take" });
            }
        }
    }
    // A hold gone by now was resolved behind this walk (it outlived its TTL and the
    // consumer undid it), and a retry of the same request id may have won since: this
    // walk's "sold out" would contradict that answer (invariant `replay`; found by the model
    // checker, `model/`). Nothing was taken here, so the answer is the retryable one.
    if let SettleOutcome::HoldGone = hold.undo().await? {
        return Err(StockError::Expired { op: "settle" });
    }
    Ok(Acked {
        outcome: end,
        confirmation: Confirmation::NotAsked,
    })
}

fn note_remaining(empties: &dyn EmptyShards, sku: u64, shard: ShardId, remaining: i64) {
    empties.set_empty(sku, shard, remaining <= 0);
}

//! The full claim protocol over the typed calls: claim on the home shard; when its slice
//! is short, hold the user's count, walk the other shards (second chance), then settle the
//! hold. Knowledge of empty shards comes from an [`EmptyShards`] view (the gateway's
//! sold-out cache) and is corrected by every outcome seen here.

use std::collections::HashSet;
use std::sync::Mutex;

use crate::client::StockClient;
use crate::error::StockError;
use crate::outcome::*;
use crate::placement::ShardId;

/// What a caller knows about empty slices. The gateway backs this with its moka cache;
/// [`LocalEmptyShards`] is a plain in-process set.
pub trait EmptyShards: Send + Sync {
    fn is_empty(&self, sku: u64, shard: ShardId) -> bool;
    fn set_empty(&self, sku: u64, shard: ShardId, empty: bool);
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

/// Runs one claim end to end. Errors are Redis trouble; an ambiguous error during a second
/// chance leaves the hold standing, for the consumer to resolve against the ledger.
pub async fn claim(
    client: &StockClient,
    meta: &SkuMeta,
    req: &ClaimRequest,
    empties: &dyn EmptyShards,
    now_ms: i64,
) -> Result<ClaimOutcome, StockError> {
    claim_with(client, meta, req, empties, now_ms, true).await
}

/// [`claim`] with the second chance switchable: `second_chance = false` is the ablation
/// that shows what rerouting buys (a claim whose home slice is empty is sold out).
pub async fn claim_with(
    client: &StockClient,
    meta: &SkuMeta,
    req: &ClaimRequest,
    empties: &dyn EmptyShards,
    now_ms: i64,
    second_chance: bool,
) -> Result<ClaimOutcome, StockError> {
    req.validate()?;
    if req.sku != meta.sku {
        return Err(StockError::InvalidArgument(
            "request and metadata SKUs differ".into(),
        ));
    }
    let placement = client.placement();
    let home = placement.home_shard(meta.sku, meta.width, &req.user);
    let others = if second_chance {
        placement.second_chances(meta.sku, meta.width, &req.user, |s| {
            empties.is_empty(meta.sku, s)
        })
    } else {
        Vec::new()
    };

    let user_seq = match client
        .claim_home(req, home, now_ms, !others.is_empty())
        .await?
    {
        HomeOutcome::Claimed {
            claim_id,
            remaining,
            ..
        } => {
            note_remaining(empties, meta.sku, home, remaining);
            return Ok(ClaimOutcome::Claimed {
                claim: Claim {
                    claim_id,
                    sku: meta.sku,
                    shard: home,
                    qty: req.qty,
                },
                rerouted: false,
            });
        }
        HomeOutcome::Hold {
            user_seq,
            remaining,
        } => {
            note_remaining(empties, meta.sku, home, remaining);
            user_seq
        }
        HomeOutcome::SoldOut { remaining } => {
            note_remaining(empties, meta.sku, home, remaining);
            return Ok(ClaimOutcome::SoldOut);
        }
        HomeOutcome::Replay(c) => return Ok(ClaimOutcome::Replay(c)),
        HomeOutcome::InProgress => return Ok(ClaimOutcome::InProgress),
        HomeOutcome::LimitReached { held } => return Ok(ClaimOutcome::LimitReached { held }),
        HomeOutcome::NotStarted => return Ok(ClaimOutcome::NotStarted),
        HomeOutcome::Ended => return Ok(ClaimOutcome::Ended),
        HomeOutcome::NotPreheated => return Ok(ClaimOutcome::NotPreheated),
    };

    // Second chance under the hold. Walking every remaining shard (not just one) keeps
    // "stock left but sold out" from happening when this gateway's view is stale; each
    // miss marks the shard empty, so later claims skip it.
    let rid = req.request_id.as_deref();
    let mut end = ClaimOutcome::SoldOut;
    for shard in others {
        let taken = match client.take(req, shard, home, user_seq, now_ms).await {
            Ok(t) => t,
            Err(e) => {
                // A clear failure took nothing: give the count back now instead of leaving
                // the user blocked until the consumer resolves the hold. An ambiguous one
                // (timeout, dropped connection) may have taken a unit: the hold stays for
                // the consumer to settle against the ledger.
                if !e.is_ambiguous() {
                    if let Err(undo) = client
                        .settle(meta.sku, home, &req.user, user_seq, rid, &Settlement::Undo)
                        .await
                    {
                        tracing::warn!(sku = meta.sku, user = %req.user, error = %undo, "undo after a failed take failed; hold left for the consumer");
                    }
                }
                return Err(e);
            }
        };
        match taken {
            TakeOutcome::Claimed {
                claim_id,
                remaining,
            } => {
                note_remaining(empties, meta.sku, shard, remaining);
                let claim = Claim {
                    claim_id,
                    sku: meta.sku,
                    shard,
                    qty: req.qty,
                };
                let keep = Settlement::Keep(claim.clone());
                // The unit is taken and recorded whatever settle says: a failed settle
                // leaves the hold (count included) for the consumer, which finds the claim
                // in the ledger and keeps it.
                if let Err(e) = client
                    .settle(meta.sku, home, &req.user, user_seq, rid, &keep)
                    .await
                {
                    tracing::warn!(sku = meta.sku, user = %req.user, error = %e, "settle keep failed; hold left for the consumer");
                }
                return Ok(ClaimOutcome::Claimed {
                    claim,
                    rerouted: true,
                });
            }
            TakeOutcome::SoldOut { remaining } => {
                note_remaining(empties, meta.sku, shard, remaining);
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
                client
                    .settle(meta.sku, home, &req.user, user_seq, rid, &Settlement::Undo)
                    .await?;
                return Err(StockError::Expired { op: "take" });
            }
        }
    }
    client
        .settle(meta.sku, home, &req.user, user_seq, rid, &Settlement::Undo)
        .await?;
    Ok(end)
}

fn note_remaining(empties: &dyn EmptyShards, sku: u64, shard: ShardId, remaining: i64) {
    empties.set_empty(sku, shard, remaining <= 0);
}

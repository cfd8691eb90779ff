//! The claim decision, owned here: what a gateway may answer a first-come claim with. One
//! call ([`decide`]) runs the claim protocol and everything after it that decides the
//! answer: the replica confirmation, the re-check of a rerouted claim's replay on the shard
//! that took it, and the replay check when the script stopped before its own (a SKU whose
//! slices are missing). The gateway maps a [`Decision`] to a reply and goes back to
//! nothing here. [`replay`] is the same decision for a request the gateway would otherwise
//! answer from memory (sold out, window closed).

use crate::client::StockClient;
use crate::error::StockError;
use crate::outcome::{Claim, ClaimOutcome, ClaimRequest, SkuMeta};
use crate::protocol::{self, Acked, ClaimOptions, Confirmation};
use crate::replay::StoredAnswer;

/// Where an acknowledged claim came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimOrigin {
    /// Taken on the user's home shard.
    Fresh,
    /// Taken on another shard after the home slice came up short.
    Rerouted,
    /// The stored answer of a request id seen before.
    Replay,
}

/// The answer to a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Acknowledge it (201, or 200 for a replay).
    Claimed {
        claim: Claim,
        origin: ClaimOrigin,
    },
    /// Taken on a primary that no replica confirmed (replica durability): a failover could
    /// lose it, so it must not be acknowledged; a retry with the same request id learns
    /// whether it lasted.
    Unconfirmed {
        claim: Claim,
        origin: ClaimOrigin,
    },
    SoldOut,
    LimitReached {
        held: u32,
    },
    NotStarted,
    Ended,
    /// The SKU's metadata without its slices (the campaign is gone, or Redis lost them and
    /// the rebuild restores them), and no stored answer for the request.
    NotPreheated,
    /// A request with this request id holds the user's count right now.
    InProgress,
}

impl Decision {
    fn confirmed(claim: Claim, origin: ClaimOrigin, confirmation: Confirmation) -> Self {
        if confirmation.acknowledgeable() {
            Self::Claimed { claim, origin }
        } else {
            Self::Unconfirmed { claim, origin }
        }
    }
}

/// Runs a claim to its answer. Errors are Redis trouble (or a bad request).
pub async fn decide(
    client: &StockClient,
    meta: &SkuMeta,
    req: &ClaimRequest,
    opts: ClaimOptions<'_>,
) -> Result<Decision, StockError> {
    let Acked {
        outcome,
        confirmation,
    } = protocol::claim(client, meta, req, opts).await?;
    Ok(match outcome {
        ClaimOutcome::Claimed { claim, rerouted } => {
            let origin = if rerouted {
                ClaimOrigin::Rerouted
            } else {
                ClaimOrigin::Fresh
            };
            Decision::confirmed(claim, origin, confirmation)
        }
        ClaimOutcome::Replay(claim) => {
            let confirmation = rerouted_replay(client, meta, req, &claim, confirmation).await;
            Decision::confirmed(claim, ClaimOrigin::Replay, confirmation)
        }
        ClaimOutcome::SoldOut => Decision::SoldOut,
        ClaimOutcome::LimitReached { held } => Decision::LimitReached { held },
        ClaimOutcome::NotStarted => Decision::NotStarted,
        ClaimOutcome::Ended => Decision::Ended,
        ClaimOutcome::InProgress => Decision::InProgress,
        // The script stopped before its replay check: a winner's retry whose slice was lost
        // must still get its first answer (`replay`, found by the model checker, model/).
        ClaimOutcome::NotPreheated => match req.request_id.as_deref() {
            Some(rid) => replay(client, meta, &req.user, rid, Replay::Plain)
                .await?
                .unwrap_or(Decision::NotPreheated),
            None => Decision::NotPreheated,
        },
    })
}

/// Which replay read [`replay`] makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replay {
    /// The stored answer alone.
    Plain,
    /// For a SKU the caller believes sold out, where no answer means "sold out": read with
    /// the home slice and the shard's vouch, so no answer where the shard may have lost it
    /// is an error until the rebuild (`StockClient::replay_confirmed_live`).
    Live,
}

/// The stored answer of `rid` as a decision (`None`: it has none), for a request the
/// caller would otherwise answer from memory. Read without a script, so no claim pipeline
/// carried a WAIT: in replica mode the answer is read again under a fence on the home
/// shard, and a reroute's take checked on its own shard (`replay.rs`).
pub async fn replay(
    client: &StockClient,
    meta: &SkuMeta,
    user: &str,
    rid: &str,
    read: Replay,
) -> Result<Option<Decision>, StockError> {
    let found = match read {
        Replay::Plain => {
            client
                .replay_confirmed(meta.sku, meta.width, user, rid)
                .await
        }
        Replay::Live => {
            client
                .replay_confirmed_live(meta.sku, meta.width, user, rid)
                .await
        }
    };
    Ok(match found? {
        None => None,
        Some((StoredAnswer::Claimed(claim), confirmation)) => Some(Decision::confirmed(
            claim,
            ClaimOrigin::Replay,
            confirmation,
        )),
        Some((StoredAnswer::InProgress, _)) => Some(Decision::InProgress),
    })
}

/// `claim.lua`'s replay confirmed by the home shard's WAIT covers only what the home shard
/// wrote. A rerouted claim's units and record are on another shard: in replica mode its
/// replay is acknowledged only once that shard's part is confirmed too (the stored answer
/// read again, and the take checked there when the answer is still tentative).
async fn rerouted_replay(
    client: &StockClient,
    meta: &SkuMeta,
    req: &ClaimRequest,
    claim: &Claim,
    confirmation: Confirmation,
) -> Confirmation {
    let home = client
        .placement()
        .home_shard(meta.sku, meta.width, &req.user);
    let (Confirmation::Confirmed, Some(rid)) = (confirmation, req.request_id.as_deref()) else {
        return confirmation;
    };
    if claim.shard == home {
        return confirmation;
    }
    match client
        .replay_confirmed(meta.sku, meta.width, &req.user, rid)
        .await
    {
        Ok(Some((StoredAnswer::Claimed(c), confirmed))) if c.claim_id == claim.claim_id => {
            confirmed
        }
        Ok(_) => Confirmation::Unconfirmed,
        Err(e) => {
            tracing::debug!(error = %e, "rerouted replay unconfirmed");
            Confirmation::Unconfirmed
        }
    }
}

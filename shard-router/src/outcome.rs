//! Typed requests and outcomes. Scripts speak integer codes; callers only see these.

use crate::error::StockError;

/// Longest user id and request id, in bytes.
pub const MAX_ID_LEN: usize = 64;

/// One campaign's placement-relevant settings, as preheated into Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkuMeta {
    pub sku: u64,
    /// Units for sale in total, over all shards.
    pub stock: u64,
    /// Number of consecutive shards the stock is split over.
    pub width: u16,
    /// Per-user limit in units.
    pub limit: u32,
    /// Sale window `[start_ms, end_ms)`, gateway clock, ms since the epoch.
    pub start_ms: i64,
    pub end_ms: i64,
    /// How the campaign sells. Written in the same HSET as the fields above, so no
    /// gateway sees the campaign without it.
    pub mode: SkuMode,
}

/// A campaign's mode, fixed at its creation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum SkuMode {
    /// First come, first served: `claim.lua`.
    #[default]
    Fcfs,
    /// Claims are entries into a draw (`crate::draw`).
    Draw(SkuDraw),
    /// Claims pass a waiting room first (`crate::queue`), then `claim.lua`.
    Queue,
}

impl SkuMode {
    /// The mode's name, as the metadata hash and `GET /v1/skus` write it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Fcfs => "fcfs",
            Self::Draw(_) => "draw",
            Self::Queue => "queue",
        }
    }

    /// The draw, when the mode is `draw`.
    pub fn draw(&self) -> Option<&SkuDraw> {
        match self {
            Self::Draw(d) => Some(d),
            _ => None,
        }
    }
}

/// What gateways need of a draw: its entry window and its published seed digest (and the
/// seed itself once the draw ran).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkuDraw {
    /// Entries open at `start_ms` and close here.
    pub draw_at_ms: i64,
    /// Lowercase hex SHA-256 of the seed, published from the campaign's creation.
    pub seed_sha256: String,
    /// The seed in hex, revealed once the draw ran.
    pub seed: Option<String>,
}

impl SkuMeta {
    /// The units of each of the `width` slices: as even as possible, the first
    /// `stock % width` slices get one more.
    pub fn slices(&self) -> Vec<u64> {
        let w = u64::from(self.width);
        (0..w)
            .map(|i| self.stock / w + u64::from(i < self.stock % w))
            .collect()
    }
}

/// A claim as the gateway passes it in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRequest {
    pub sku: u64,
    pub user: String,
    pub qty: u32,
    pub request_id: Option<String>,
}

impl ClaimRequest {
    /// Checks lengths and ranges that the keyspace relies on. The per-SKU limit is checked
    /// by the script, which is the authority on it.
    pub fn validate(&self) -> Result<(), StockError> {
        let bad = |m: String| Err(StockError::InvalidArgument(m));
        if self.user.is_empty() || self.user.len() > MAX_ID_LEN {
            return bad(format!("user must be 1..={MAX_ID_LEN} bytes"));
        }
        if let Some(rid) = &self.request_id {
            if rid.is_empty() || rid.len() > MAX_ID_LEN {
                return bad(format!("request_id must be 1..={MAX_ID_LEN} bytes"));
            }
        }
        if self.qty == 0 {
            return bad("qty must be at least 1".into());
        }
        Ok(())
    }
}

/// A successful claim, as answered to the client (and replayed for its request id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub claim_id: String,
    pub sku: u64,
    /// Shard whose slice gave the units.
    pub shard: u16,
    pub qty: u32,
}

/// The end result of the full claim protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// Units taken; `rerouted` when a second chance on another shard gave them.
    Claimed {
        claim: Claim,
        rerouted: bool,
    },
    /// The same request id succeeded before: the same answer, no second unit.
    Replay(Claim),
    /// No shard of the SKU can cover the request.
    SoldOut,
    /// The user already holds `held` units and `held + qty` passes the limit.
    LimitReached {
        held: u32,
    },
    NotStarted,
    Ended,
    /// The SKU's slices are missing: no campaign, or Redis lost it. Never read as zero.
    NotPreheated,
    /// The same request id is being served right now (under a hold); retry shortly.
    InProgress,
}

/// Outcome of `claim.lua` on the home shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HomeOutcome {
    Claimed {
        claim_id: String,
        user_seq: u64,
        remaining: i64,
    },
    Replay(Claim),
    /// The slice cannot cover the request; the user's count is held under `user_seq`.
    Hold {
        user_seq: u64,
        remaining: i64,
        /// The home shard's rebuild generation when the hold was placed (see `take.lua`).
        gen: u64,
    },
    InProgress,
    SoldOut {
        remaining: i64,
    },
    LimitReached {
        held: u32,
    },
    NotStarted,
    Ended,
    NotPreheated,
}

/// Outcome of `take.lua` on a second-chance shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TakeOutcome {
    Claimed {
        claim_id: String,
        remaining: i64,
    },
    SoldOut {
        remaining: i64,
    },
    NotStarted,
    Ended,
    NotPreheated,
    /// The hold is too close to its expiry (by Redis's clock) to take under it; nothing
    /// was taken.
    HoldExpired,
}

/// How a hold ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settlement {
    /// The units were taken elsewhere: the count stays, the answer is stored for replay.
    Keep(Claim),
    /// Nothing was taken: the count goes back.
    Undo,
    /// [`Settlement::Undo`] of the hold placed under rebuild generation `gen` (the hold's
    /// name: `claim.lua`'s reply to the gateway, the hold's value to the consumer). After a
    /// loss a user's sequence starts again, so another hold of that `user|seq` (a retry's)
    /// has another generation, and is left standing.
    UndoOwn { gen: u64 },
    /// [`Settlement::Keep`] of the hold placed under rebuild generation `gen`, as
    /// [`Settlement::UndoOwn`].
    KeepOwn { claim: Claim, gen: u64 },
}

/// A hold standing on a home shard while (or because) a second chance ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub sku: u64,
    pub home: u16,
    pub user: String,
    pub user_seq: u64,
    pub qty: u32,
    /// Past this (gateway clock) the consumer may resolve it against the ledger.
    pub expires_ms: i64,
    /// The rebuild generation it was placed under, its name for a settle
    /// ([`Settlement::UndoOwn`], [`Settlement::KeepOwn`]).
    pub gen: u64,
    /// The request id being served, so resolving the hold also settles its replay answer.
    pub request_id: Option<String>,
}

/// Outcome of `settle.lua`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettleOutcome {
    Settled {
        qty: u32,
    },
    /// Already settled, or resolved by the consumer.
    HoldGone,
}

/// Outcome of `preheat.lua` on one shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreheatOutcome {
    Preheated {
        slice: i64,
    },
    /// A slice existed and was left as it is.
    Live {
        current: i64,
    },
    /// A rebuild from the ledger holds the shard (see `lua/rebuild_fence.lua`); nothing
    /// was written.
    Rebuilding,
    /// Written back from the ledger (the consumer's rebuild path, not preheat.lua).
    Rebuilt {
        slice: i64,
    },
}

/// Outcome of one release step (stock side or user side).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseStep {
    Released,
    AlreadyReleased,
    /// Stock side only: the slice is missing; nothing was recreated.
    NotPreheated,
}

/// Both release steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReleaseOutcome {
    pub stock: ReleaseStep,
    pub user: ReleaseStep,
}

/// What a release needs to know about a claim (all of it is in the ledger row).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseRequest {
    pub sku: u64,
    pub claim_id: String,
    pub user: String,
    pub qty: u32,
    /// Shard the units came from.
    pub shard: u16,
    /// The user's home shard (holds the count).
    pub home: u16,
}

/// What replica durability (`StockConfig::replica_ack`) confirmed about a claim or replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confirmation {
    /// No replica durability configured.
    NotAsked,
    /// A replica acknowledged every write the claim made (on the connections that made
    /// them): it survives a failover.
    Confirmed,
    /// Taken on the primary, not (yet) confirmed: must not be acknowledged.
    Unconfirmed,
}

impl Confirmation {
    /// What a batch's WAIT counted (`None`: no replica durability).
    pub(crate) fn of(acked: Option<u32>) -> Self {
        match acked {
            None => Self::NotAsked,
            Some(n) if n >= 1 => Self::Confirmed,
            Some(_) => Self::Unconfirmed,
        }
    }

    /// Both confirmed, unless either was not asked.
    pub(crate) fn and(self, other: Self) -> Self {
        match (self, other) {
            (Self::NotAsked, o) | (o, Self::NotAsked) => o,
            (Self::Confirmed, Self::Confirmed) => Self::Confirmed,
            _ => Self::Unconfirmed,
        }
    }

    /// True unless replica durability is on and did not confirm.
    pub fn acknowledgeable(self) -> bool {
        self != Self::Unconfirmed
    }
}

/// An outcome and what replica durability confirmed of the writes behind it: of one
/// script's batch (`StockClient::claim_home`, `take`, `settle`), or of a whole claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acked<T> {
    pub outcome: T,
    pub confirmation: Confirmation,
}

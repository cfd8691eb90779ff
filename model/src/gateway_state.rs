//! What the gateways and their clients hold in the model's state: each request's attempts
//! and first success, what a client was told, a request in flight and where it is in the
//! protocol, and a gateway's sold-out cache, undelivered events and replay filter. Apart
//! from the steps that change them (`gateway.rs`) because the system's `State` holds them,
//! and those steps act on that `State`.

use std::collections::BTreeSet;

use crate::keyspace::{ClaimId, Event, Rid, ShardId, Units, User};

/// What the client was told.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reply {
    /// 201.
    Created(ClaimId),
    /// 200: a retry's stored answer.
    Replayed(ClaimId),
    /// 410 from a script or the replay read.
    SoldOut,
    /// 410 from memory: the replay filter did not list the user.
    SoldOutFiltered,
    /// 403 limit.
    Limit,
    /// 409: the request id is held right now.
    InProgress,
    /// 503: Redis trouble or a write no replica confirmed.
    Unavailable,
    /// 503 `restoring`: the guard refused, the shard's process is not vouched for.
    Restoring,
    /// 404/403: no slice (lost, fenced) or the window.
    Refused,
}

impl Reply {
    pub(crate) fn success(self) -> Option<ClaimId> {
        match self {
            Reply::Created(c) | Reply::Replayed(c) => Some(c),
            _ => None,
        }
    }

    /// A final "no" (a 503 or 409 asks the client to come back).
    pub(crate) fn refusal(self) -> bool {
        matches!(
            self,
            Reply::SoldOut | Reply::SoldOutFiltered | Reply::Limit | Reply::Refused
        )
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Request {
    pub attempts_left: u8,
    /// The claim id of the first success answered.
    pub success: Option<ClaimId>,
}

impl Request {
    pub fn new(attempts: u8) -> Self {
        Self {
            attempts_left: attempts,
            success: None,
        }
    }
}

/// Where a request is in the protocol.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Pc {
    Start,
    /// Under a hold: the shards still to try.
    Walking {
        seq: u32,
        gen: u32,
        deadline: i64,
        walk: Vec<ShardId>,
    },
    /// A take succeeded; settle keeps the hold.
    Keeping {
        seq: u32,
        /// The generation the hold was placed under, which names it in the keep.
        gen: u32,
        claim: ClaimId,
        confirmed: bool,
    },
    /// Nothing taken; settle gives the count back, then `answer`.
    Undoing {
        seq: u32,
        /// The generation the hold was placed under, which names it in the undo.
        gen: u32,
        answer: Reply,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Task {
    pub gw: u8,
    pub user: User,
    pub rid: Rid,
    pub qty: Units,
    pub pc: Pc,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Filter {
    pub users: BTreeSet<User>,
    /// `HLEN useq` summed at the read: a field added since changes it.
    pub count: usize,
    /// When Redis last confirmed it; used within the same step of the clock only
    /// (`REVALIDATE_EVERY`).
    pub at: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Gateway {
    /// Shards known empty (the sold-out cache).
    pub cache: BTreeSet<ShardId>,
    /// Pub/Sub messages received, not yet processed.
    pub inbox: Vec<Event>,
    pub filter: Option<Filter>,
    /// An event meant for this gateway was lost.
    pub lost: bool,
}

//! `lua/claim.lua`.

use crate::keyspace::{Answer, ClaimId, Event, HoldVal, Record, Rid, Shard, ShardId, Units, User};
use crate::mutant::Mutant;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ClaimArgs {
    pub user: User,
    pub qty: Units,
    /// The gateway's clock (window check, hold expiry).
    pub now: i64,
    pub rid: Option<Rid>,
    pub shard: ShardId,
    /// 0: no hold wanted (a short slice answers sold out).
    pub hold_ttl: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClaimReply {
    Claimed {
        claim: ClaimId,
        seq: u32,
        remaining: Units,
    },
    Replay {
        claim: ClaimId,
        shard: ShardId,
        qty: Units,
    },
    Hold {
        seq: u32,
        remaining: Units,
        gen: u32,
    },
    InProgress,
    SoldOut {
        remaining: Units,
    },
    LimitReached {
        held: Units,
    },
    NotStarted,
    Ended,
    NotPreheated,
    BadArgument,
}

/// claim.lua, long because it follows the script statement by statement, in its order, so
/// the two read side by side (`tests/conformance.rs` holds them to the same answers):
/// the checks that answer without a write, then the user's count and seq, then a hold
/// when the slice is short, or the unit, the stream entry and the stored answer.
pub fn claim(
    sh: &mut Shard,
    a: &ClaimArgs,
    mutant: Option<Mutant>,
    events: &mut super::Events,
) -> ClaimReply {
    if a.qty < 1 {
        return ClaimReply::BadArgument;
    }
    let (Some(stock), Some(meta)) = (sh.stock, sh.meta.clone()) else {
        return ClaimReply::NotPreheated;
    };
    if let Some(rid) = a.rid {
        match sh.req.get(&(a.user, rid)) {
            Some(Answer::Pending) => return ClaimReply::InProgress,
            Some(&Answer::Done {
                claim, shard, qty, ..
            }) => return ClaimReply::Replay { claim, shard, qty },
            None => {}
        }
    }
    if a.now < meta.start {
        return ClaimReply::NotStarted;
    }
    if a.now >= meta.end {
        return ClaimReply::Ended;
    }
    let held = sh.users.get(&a.user).copied().unwrap_or(0);
    if held + a.qty > meta.limit && !super::on(mutant, Mutant::NoLimitCheck) {
        return ClaimReply::LimitReached { held };
    }
    if stock < a.qty && a.hold_ttl == 0 {
        return ClaimReply::SoldOut { remaining: stock };
    }
    *sh.users.entry(a.user).or_insert(0) += a.qty;
    let seq = {
        let s = sh.useq.entry(a.user).or_insert(0);
        *s += 1;
        *s
    };
    if stock < a.qty {
        sh.holds.insert(
            (a.user, seq),
            HoldVal {
                qty: a.qty,
                expires: a.now + a.hold_ttl,
                gen: sh.gen(),
                rid: a.rid,
            },
        );
        if let Some(rid) = a.rid {
            sh.req.insert((a.user, rid), Answer::Pending);
        }
        return ClaimReply::Hold {
            seq,
            remaining: stock,
            gen: meta.gen,
        };
    }
    let remaining = stock - a.qty;
    sh.stock = Some(remaining);
    let entry = sh.xadd(Record {
        user: a.user,
        qty: a.qty,
        seq,
        shard: a.shard,
        home: a.shard,
        rid: a.rid,
        gen: meta.gen,
    });
    let claim = ClaimId {
        shard: a.shard,
        entry,
    };
    if remaining == 0 {
        events.push(Event::Empty(a.shard));
    }
    if let Some(rid) = a.rid {
        sh.req.insert(
            (a.user, rid),
            Answer::Done {
                claim,
                shard: a.shard,
                qty: a.qty,
                tentative: false,
            },
        );
    }
    ClaimReply::Claimed {
        claim,
        seq,
        remaining,
    }
}

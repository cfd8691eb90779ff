//! `lua/take.lua`.

use crate::keyspace::{ClaimId, Event, Record, Rid, Shard, ShardId, Units, User};
use crate::mutant::Mutant;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TakeArgs {
    pub user: User,
    pub qty: Units,
    pub now: i64,
    pub seq: u32,
    pub home: ShardId,
    pub rid: Option<Rid>,
    pub shard: ShardId,
    /// The hold's expiry less a third of its TTL, on Redis's clock.
    pub deadline: i64,
    /// The home shard's generation when the hold was placed.
    pub hold_gen: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TakeReply {
    Claimed { claim: ClaimId, remaining: Units },
    SoldOut { remaining: Units },
    NotStarted,
    Ended,
    NotPreheated,
    BadArgument,
    HoldExpired,
}

/// `redis_now`: Redis's `TIME`, which the deadline is judged by.
pub fn take(
    sh: &mut Shard,
    a: &TakeArgs,
    redis_now: i64,
    mutant: Option<Mutant>,
    events: &mut super::Events,
) -> TakeReply {
    if a.qty < 1 {
        return TakeReply::BadArgument;
    }
    if redis_now > a.deadline && !super::on(mutant, Mutant::TakeIgnoresDeadline) {
        return TakeReply::HoldExpired;
    }
    let (Some(stock), Some(meta)) = (sh.stock, sh.meta.clone()) else {
        return TakeReply::NotPreheated;
    };
    if meta.gen > a.hold_gen {
        return TakeReply::HoldExpired;
    }
    if a.now < meta.start {
        return TakeReply::NotStarted;
    }
    if a.now >= meta.end {
        return TakeReply::Ended;
    }
    if stock < a.qty {
        return TakeReply::SoldOut { remaining: stock };
    }
    let remaining = stock - a.qty;
    sh.stock = Some(remaining);
    let entry = sh.xadd(Record {
        user: a.user,
        qty: a.qty,
        seq: a.seq,
        shard: a.shard,
        home: a.home,
        rid: a.rid,
        gen: meta.gen,
    });
    if remaining == 0 {
        events.push(Event::Empty(a.shard));
    }
    TakeReply::Claimed {
        claim: ClaimId {
            shard: a.shard,
            entry,
        },
        remaining,
    }
}

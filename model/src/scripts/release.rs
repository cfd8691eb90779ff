//! `lua/release_stock.lua` and `lua/release_user.lua`.

use crate::keyspace::{ClaimId, Event, Shard, ShardId, Units, User};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReleaseReply {
    /// The slice after the release (stock), or the user's count (user).
    Released(Units),
    AlreadyReleased,
    NotPreheated,
    BadArgument,
}

pub fn release_stock(
    sh: &mut Shard,
    claim: ClaimId,
    qty: Units,
    shard: ShardId,
    events: &mut super::Events,
) -> ReleaseReply {
    if qty < 1 {
        return ReleaseReply::BadArgument;
    }
    let Some(slice) = sh.stock else {
        return ReleaseReply::NotPreheated;
    };
    if !sh.relstock.insert(claim) {
        return ReleaseReply::AlreadyReleased;
    }
    let paid = sh.debt.min(qty).max(0);
    sh.debt -= paid;
    let back = qty - paid;
    if back == 0 {
        return ReleaseReply::Released(slice);
    }
    let slice = slice + back;
    sh.stock = Some(slice);
    if slice == back {
        events.push(Event::Restock(shard));
    }
    ReleaseReply::Released(slice)
}

pub fn release_user(sh: &mut Shard, claim: ClaimId, user: User, qty: Units) -> ReleaseReply {
    if qty < 1 {
        return ReleaseReply::BadArgument;
    }
    if sh.meta.as_ref().is_some_and(|m| m.fenced) {
        return ReleaseReply::NotPreheated;
    }
    if !sh.reluser.insert(claim) {
        return ReleaseReply::AlreadyReleased;
    }
    let held = sh.users.entry(user).or_insert(0);
    *held -= qty;
    let held = *held;
    if held <= 0 {
        sh.users.remove(&user);
        return ReleaseReply::Released(0);
    }
    ReleaseReply::Released(held)
}

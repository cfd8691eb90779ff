//! The draw's invariants as properties. `always` ones hold in every state; the quiescent
//! ones (`entries-reach-ledger`, `answers-final`) where the part they are about has
//! nothing left to do. The `sometimes` ones show the check reaches what it is about.

use stateright::Property;

use super::scripts::{DrawState, EnterReply, User};
use super::system::{DrawSystem, Restore, State, Svc, Violation};

pub fn all() -> Vec<Property<DrawSystem>> {
    vec![
        Property::always("draw-covers-committed", |_, st: &State| {
            st.violations
                .iter()
                .all(|v| !matches!(v, Violation::RanksNotBest | Violation::MissedEntry(_)))
        }),
        Property::always("one-entry-per-user", one_entry_per_user),
        Property::always("no-oversell", no_oversell),
        Property::always("user-limit", |_, st: &State| user_limit(st)),
        Property::always("waitlist-order", |_, st: &State| waitlist_order(st)),
        Property::always("answer-truth", answer_truth),
        Property::always("drawn-from-ledger", |m, st: &State| {
            drawn_from_ledger(m, st)
        }),
        Property::always("entries-reach-ledger", |m, st| {
            !readers_quiet(m, st) || entries_reach_ledger(st)
        }),
        Property::always("answers-final", answers_final),
        Property::sometimes("drawn", |_, st: &State| st.ledger.ranks.is_some()),
        Property::sometimes("the waitlist served", |m, st: &State| {
            st.ledger.granted > m.cfg.stock
        }),
    ]
}

/// Each shard's stream and entrants hold a user at most once, the ranks name each user
/// once, and every entry sits on its user's home shard.
fn one_entry_per_user(m: &DrawSystem, st: &State) -> bool {
    let streams = st.nodes.iter().enumerate().all(|(s, n)| {
        let mut users: Vec<User> = n.master.stream.values().map(|e| e.user).collect();
        let all = users.len();
        users.sort_unstable();
        users.dedup();
        users.len() == all
            && users.iter().all(|&u| usize::from(m.cfg.home(u)) == s)
            && n.master
                .entrants
                .keys()
                .all(|&u| usize::from(m.cfg.home(u)) == s)
    });
    let ranks = st.ledger.ranks.as_ref().is_none_or(|r| {
        let mut users: Vec<User> = r.iter().map(|(u, _)| *u).collect();
        let all = users.len();
        users.sort_unstable();
        users.dedup();
        users.len() == all
    });
    streams && ranks
}

/// Units held (claims not released) never exceed the stock.
fn no_oversell(m: &DrawSystem, st: &State) -> bool {
    let held = st.ledger.claims.values().filter(|c| !c.released).count() as u32;
    held <= m.cfg.stock && held + st.ledger.left == m.cfg.stock
}

/// No user holds more than one unit (nor was granted twice).
fn user_limit(st: &State) -> bool {
    let mut users: Vec<User> = st.ledger.claims.values().map(|c| c.user).collect();
    let all = users.len();
    users.sort_unstable();
    users.dedup();
    users.len() == all
}

/// A rank gets a unit only if every better rank got one (a grant is never passed over
/// here: only grants claim, so no rank holds the limit already).
fn waitlist_order(st: &State) -> bool {
    let granted = |u: User| st.ledger.claims.values().any(|c| c.user == u);
    let Some(ranks) = &st.ledger.ranks else {
        return st.ledger.claims.is_empty();
    };
    let first_ungranted = ranks.iter().position(|&(u, _)| !granted(u));
    ranks
        .iter()
        .enumerate()
        .all(|(i, &(u, _))| !granted(u) || first_ungranted.is_none_or(|f| i < f))
        && st
            .ledger
            .claims
            .values()
            .all(|c| ranks.iter().any(|&(u, _)| u == c.user))
}

/// What draw_enter.lua would answer each user now, once their home shard is drawn, is
/// true of the ledger: `won` names a claim of theirs, `won` (pending) a rank the stock
/// covers whose grant is not made yet (no claim, or `granted_rank` below it: the service
/// still writes its win), `waitlisted` their rank's place after the stock, `lost` and
/// `ended` no rank.
fn answer_truth(m: &DrawSystem, st: &State) -> bool {
    (0..m.cfg.users).all(|u| {
        let h = m.cfg.home(u);
        let mut home = st.nodes[usize::from(h)].master.clone();
        if home.state() != Some(DrawState::Drawn) {
            return true;
        }
        // No exception for a restore under way: it holds the shard (no state) until its
        // wins and marks are back (`RestoreOpensAtOnce` is the restore that did not).
        if st.ledger.ranks.is_none() {
            return false;
        }
        let rank = st.ledger.rank_of(u);
        let stock = m.cfg.stock;
        let claimed = st.ledger.claims.values().any(|c| c.user == u);
        match home.enter(u, m.cfg.prio(u), 1) {
            EnterReply::Won(c) => st.ledger.claims.get(&c.id).is_some_and(|cl| cl.user == u),
            EnterReply::WonPending => {
                rank.is_some_and(|r| r <= stock && (!claimed || st.ledger.granted < r))
            }
            EnterReply::Waitlisted(p) => rank == Some(stock + p),
            EnterReply::Lost | EnterReply::Ended => rank.is_none(),
            _ => false,
        }
    })
}

/// No read in flight and none that would commit anything.
pub fn readers_quiet(m: &DrawSystem, st: &State) -> bool {
    st.readers.iter().all(Option::is_none) && (0..m.cfg.shards).all(|s| m.read_of(st, s).is_none())
}

/// Every entrant a shard holds is in the ledger once the readers have nothing left; past a
/// settle that timed out, entries not committed before the draw stay out of it.
fn entries_reach_ledger(st: &State) -> bool {
    (st.timed_out && st.ledger.ranks.is_some())
        || st.nodes.iter().all(|n| {
            n.master
                .entrants
                .keys()
                .all(|u| st.ledger.entries.contains_key(u))
        })
}

/// Once recorded, the ranks are the ledger's best `k` of the entries it holds, and it holds
/// as many as the draw counted (what `consumer draw verify` checks: an entry that joined
/// the ledger after the draw makes an honest draw fail it).
fn drawn_from_ledger(m: &DrawSystem, st: &State) -> bool {
    st.ledger.ranks.as_ref().is_none_or(|r| {
        *r == st.ledger.best(m.cfg.k()) && st.ledger.entries.len() as u32 == st.ledger.entrants
    })
}

/// Once the draw is recorded, whenever the service and the restore loop are between
/// passes, one more pass of the service (no fault in it) leaves no shard where entrants
/// are never told their standing: every shard with entrants drawn (or missing, the
/// restore's), and the seed revealed.
fn answers_final(m: &DrawSystem, st: &State) -> bool {
    if st.ledger.ranks.is_none() || st.svc != Svc::Idle || st.restore != Restore::Idle {
        return true;
    }
    let mut after = st.clone();
    if m.service(&mut after) {
        for _ in 0..64 {
            if after.svc == Svc::Idle {
                break;
            }
            m.service(&mut after);
        }
    }
    after.revealed
        && after.nodes.iter().all(|n| match n.master.state() {
            None | Some(DrawState::Drawn) => true,
            _ => n.master.entrants.is_empty(),
        })
}

//! The invariants of docs/DESIGN.md as properties, named as there. `always` ones hold in
//! every state; the quiescent ones (`books-close`, `nothing-lost`) in every state where
//! nothing is in flight. The `sometimes` ones show the model reaches what it claims to
//! explore (a reroute, a rebuild, a release), so a property cannot hold vacuously.

use std::collections::{BTreeMap, BTreeSet};

use stateright::Property;

use crate::gateway_state::Reply;
use crate::keyspace::{ClaimId, Record, ShardId, Units, User, Vouch};
use crate::ledger::Status;
use crate::system::{State, System};

pub fn all(m: &System) -> Vec<Property<System>> {
    let mut all = vec![
        Property::always("no-oversell", |_, st: &State| no_oversell(st)),
        Property::always("user-limit", user_limit),
        Property::always("replay", |_, st: &State| st.violations.is_empty()),
        Property::always("ledger-truth", ledger_truth),
        Property::always("books-close", |m, st| {
            !quiescent(m, st) || books_close(m, st)
        }),
        Property::always("nothing-lost", |m, st| {
            !quiescent(m, st) || nothing_lost(st)
        }),
        Property::sometimes("a reroute acknowledged", |_, st: &State| st.reroutes > 0),
        Property::sometimes("a sell-out", |_, st: &State| {
            st.ledger.unreleased().count() as Units >= st.ledger.released()
        }),
        Property::sometimes("a quiescent end", |m, st| {
            quiescent(m, st) && !st.ledger.claims.is_empty()
        }),
    ];
    // Where a master comes back older, show that the guard refused a sale there and that
    // such a shard was vouched again after its rebuild.
    if m.cfg.faults > 0 && m.cfg.ops.restore {
        all.push(Property::sometimes(
            "a sale refused restoring",
            |_, st: &State| st.answers.iter().any(|(_, _, r)| *r == Reply::Restoring),
        ));
        all.push(Property::sometimes(
            "a new process vouched after a rebuild",
            |_, st: &State| {
                st.rebuilds > 0
                    && st
                        .nodes
                        .iter()
                        .any(|n| n.run > 0 && n.master.vouch == Some(Vouch::Run(n.run)))
            },
        ));
    }
    // Where a retry and a lost event can meet, show that the replay filter's residual is
    // reached (and it is allowed only within its bound: `replay` above).
    let c = &m.cfg;
    if c.retrying > 0 && c.faults > 0 && c.ops.lose_event && c.ops.replay_filter {
        all.push(Property::sometimes(
            "replay-filter residual",
            |_, st: &State| st.residuals > 0,
        ));
    }
    all
}

/// Acknowledged claims whose units are still out (the ledger has not released them).
fn acked_out(st: &State) -> impl Iterator<Item = &(ClaimId, User, Units)> {
    st.acked.iter().filter(|(id, user, _)| {
        !st.voidable.contains(&(*id, *user))
            && !st
                .ledger
                .claims
                .get(id)
                .is_some_and(|r| r.rec.user == *user && r.status == Status::Released)
    })
}

/// Neither the ledger nor the clients' acknowledgements hold more units than released.
fn no_oversell(st: &State) -> bool {
    let released = st.ledger.released();
    let ledger: Units = st.ledger.unreleased().map(|(_, r)| r.rec.qty).sum();
    let acked: Units = acked_out(st).map(|(_, _, q)| q).sum();
    ledger <= released && acked <= released
}

/// No user holds more than the limit, in the ledger or in what clients were told.
fn user_limit(m: &System, st: &State) -> bool {
    let limit = m.cfg.limit;
    let mut told: BTreeMap<User, Units> = BTreeMap::new();
    for (_, u, q) in acked_out(st) {
        *told.entry(*u).or_insert(0) += q;
    }
    told.values().all(|&u| u <= limit) && (0..m.cfg.users).all(|u| st.ledger.units_of(u) <= limit)
}

/// Claims of shard `s` still out, whether in its stream or in the ledger, each once (a
/// claim id Redis handed out twice counts twice: two records).
fn out_of(st: &State, s: ShardId) -> Units {
    let sh = &st.nodes[usize::from(s)].master;
    let mut seen: BTreeSet<(ClaimId, Record)> = BTreeSet::new();
    for (&e, r) in &sh.stream {
        let id = r.claim_id(e);
        let released = st
            .ledger
            .claims
            .get(&id)
            .is_some_and(|row| row.rec == *r && row.status == Status::Released);
        if !released && !sh.relstock.contains(&id) {
            seen.insert((id, *r));
        }
    }
    for (id, row) in st.ledger.unreleased() {
        if id.shard == s && !sh.relstock.contains(id) {
            seen.insert((*id, row.rec));
        }
    }
    seen.iter().map(|(_, r)| r.qty).sum()
}

/// Redis never offers a unit the ledger and the streams hold: on every live shard,
/// `slice + out − debt ≤ share` (a rebuild or preheat that refilled sold stock breaks it).
fn ledger_truth(m: &System, st: &State) -> bool {
    (0..m.cfg.shards).all(|s| {
        let sh = &st.nodes[usize::from(s)].master;
        match (sh.stock, &sh.meta) {
            // A shard the guard refuses on offers nothing until the watch rebuilt it.
            _ if crate::vouch::unvouched(st, s) => true,
            (Some(slice), Some(meta)) if !meta.fenced => {
                slice + out_of(st, s) - sh.debt <= m.share(st, s)
            }
            _ => true,
        }
    })
}

/// Nothing in flight: no request, no hold, no stream entry the consumer would still read
/// (committed entries may stay until a trim), no read paused before its commit, no release
/// or wave half done, every slice live.
pub fn quiescent(m: &System, st: &State) -> bool {
    st.tasks.is_empty()
        && st.stalled.is_none()
        && !st.db_refusing
        && (0..m.cfg.shards).all(|s| !crate::vouch::unvouched(st, s))
        && (0..m.cfg.shards).all(|s| m.caught_up(st, s))
        && st.nodes.iter().all(|n| {
            n.master.holds.is_empty()
                && n.master.stock.is_some()
                && n.master.gen() == st.ledger.rebuild_gen
        })
        && st
            .ledger
            .claims
            .values()
            .all(|r| r.status != Status::Releasing)
        && st
            .ledger
            .waves
            .values()
            .all(|(_, w)| *w == crate::ledger::WaveState::Applied)
}

/// Per shard `slice + active − debt = share`, and per user the home count equals the
/// ledger's units.
fn books_close(m: &System, st: &State) -> bool {
    let stock = (0..m.cfg.shards).all(|s| {
        let sh = &st.nodes[usize::from(s)].master;
        sh.stock.unwrap_or(0) + out_of(st, s) - sh.debt == m.share(st, s)
    });
    // A user whose claim was void with its shard may be left holding its count.
    let users = (0..m.cfg.users)
        .filter(|u| !st.voidable.iter().any(|(_, v)| v == u))
        .all(|u| {
            let home = &st.nodes[usize::from(m.cfg.home(u))].master;
            home.users.get(&u).copied().unwrap_or(0) == st.ledger.units_of(u)
        });
    stock && users
}

/// Every acknowledged claim is in the ledger, as the claim of the user it was told to.
fn nothing_lost(st: &State) -> bool {
    st.acked.iter().all(|(id, user, _)| {
        st.voidable.contains(&(*id, *user))
            || st
                .ledger
                .claims
                .get(id)
                .is_some_and(|r| r.rec.user == *user)
    })
}

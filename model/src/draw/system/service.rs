//! The draw service (`campaign-ops/src/draw/run.rs`, with `mark.rs` and `grant.rs`), one step at a time: close every
//! shard and find its stream's last id, settle (wait for the readers), record the ranks,
//! mark every shard, reveal the seed, then grant rank by rank.

use super::{Claim, DrawSystem, State, Violation};
use crate::draw::config::DrawMutant;
use crate::draw::scripts::{ClaimRef, CloseReply, DrawState, GrantAnswer, Prio, User};

/// Where the draw service (`draw::run::step`) stands in its pass.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Svc {
    Idle,
    /// `draw_close` on shard `next`; `accepted` entrants so far, `unread`: a shard before
    /// it not read up to its close yet.
    Closing {
        next: u8,
        accepted: u32,
        unread: bool,
    },
    /// `entries_last` on shard `next` (its target kept while the master is the same) and
    /// the ledger's place of its stream.
    Last {
        next: u8,
        accepted: u32,
        unread: bool,
    },
    /// Every shard closed: the ledger's count, then its best `k` (and the count they are
    /// drawn from).
    Settle {
        accepted: u32,
        unread: bool,
    },
    /// Ranked from the ledger's `total` entries, to record.
    Record {
        ranks: Vec<(User, Prio)>,
        total: u32,
    },
    /// `draw_state` of shard `next` (closed first when found `open`); `any`: a shard of
    /// this pass marked.
    Marking {
        next: u8,
        any: bool,
    },
    /// mark_shard's first half on shard `next`: the wins (`W|`) of the ledger's grants.
    Wins {
        next: u8,
        any: bool,
    },
    /// mark_shard's second half on shard `next`: the ranks.
    Mark {
        next: u8,
        any: bool,
    },
    /// The SKU metadata with the seed, when a shard was marked or the seed is hidden.
    Reveal {
        any: bool,
    },
    /// The grant pass: the next rank to claim for.
    Granting {
        next: u32,
    },
    /// Claimed (or replayed) for `rank`: the win mark next.
    Won {
        rank: u32,
        user: User,
        claim: ClaimRef,
    },
    /// Marked: `set_granted` next.
    Granted {
        rank: u32,
    },
}

impl DrawSystem {
    /// The draw is due: open and past its time, or drawn with ranks not granted yet.
    fn due(&self, st: &State) -> bool {
        match &st.ledger.ranks {
            None => st.past,
            Some(r) => (st.ledger.granted as usize) < r.len(),
        }
    }

    /// The draw loop has something to do for this draw: it is due, or drawn with a shard
    /// `open` or `closed` or the seed hidden.
    pub fn service_work(&self, st: &State) -> bool {
        if self.due(st) {
            return true;
        }
        st.ledger.ranks.is_some()
            && !self.cfg.mutant_is(DrawMutant::MarkOnlyDue)
            && (!st.revealed
                || st
                    .nodes
                    .iter()
                    .any(|n| matches!(n.master.state(), Some(DrawState::Open | DrawState::Closed))))
    }

    /// `draws::record`: `false` when refused (the ledger's count moved since the ranks).
    fn record(&self, st: &mut State, ranks: Vec<(User, Prio)>, total: u32) -> bool {
        if st.ledger.ranks.is_some() {
            return true;
        }
        if st.ledger.entries.len() as u32 != total
            && !self.cfg.mutant_is(DrawMutant::RecordWithoutCount)
        {
            return false;
        }
        // Past the settle's timeout the draw is from what the ledger has when it reads.
        if !st.timed_out && ranks != st.ledger.best(self.cfg.k()) {
            st.violations.insert(Violation::RanksNotBest);
        }
        if !st.timed_out {
            for &u in &st.acked {
                let home = &st.nodes[usize::from(self.cfg.home(u))].master;
                let survived = home.stream.values().any(|e| e.user == u);
                if survived && !st.ledger.entries.contains_key(&u) {
                    st.violations.insert(Violation::MissedEntry(u));
                }
            }
        }
        st.ledger.ranks = Some(ranks);
        st.ledger.entrants = total;
        true
    }

    /// The settle's wait: a shard not read up to its close, or fewer entries than accepted.
    pub(super) fn settle_waits(&self, st: &State, accepted: u32, unread: bool) -> bool {
        let fewer = (st.ledger.entries.len() as u32) < accepted;
        if self.cfg.mutant_is(DrawMutant::NoSettle) {
            false
        } else if self.cfg.mutant_is(DrawMutant::SettleByCount) {
            fewer
        } else {
            fewer || unread
        }
    }

    fn after_marking(&self, next: u8, any: bool) -> Svc {
        if next + 1 == self.cfg.shards {
            Svc::Reveal { any }
        } else {
            Svc::Marking {
                next: next + 1,
                any,
            }
        }
    }

    /// The service's next step (one script, one ledger call, or one grant): `false` when
    /// it is idle with nothing to do.
    pub fn service(&self, st: &mut State) -> bool {
        st.svc = match st.svc.clone() {
            Svc::Idle => {
                if !self.service_work(st) {
                    return false;
                }
                if st.ledger.ranks.is_none() {
                    Svc::Closing {
                        next: 0,
                        accepted: 0,
                        unread: false,
                    }
                } else {
                    Svc::Marking {
                        next: 0,
                        any: false,
                    }
                }
            }
            Svc::Closing {
                next,
                accepted,
                unread,
            } => match st.nodes[usize::from(next)].master.close() {
                // Lost: the restore puts it back first.
                CloseReply::NotPreheated => Svc::Idle,
                CloseReply::Closed { entrants, .. } => Svc::Last {
                    next,
                    accepted: accepted + entrants,
                    unread,
                },
            },
            Svc::Last {
                next,
                accepted,
                unread,
            } => self.last(st, next, accepted, unread),
            Svc::Settle { accepted, unread } => self.settle(st, accepted, unread),
            Svc::Record { ranks, total } => self.record_step(st, ranks, total),
            Svc::Marking { next, any } => self.marking(st, next, any),
            Svc::Wins { next, any } => {
                self.write_wins(st, next);
                Svc::Mark { next, any }
            }
            Svc::Mark { next, .. } => {
                self.mark_shard(st, next, None);
                self.after_marking(next, true)
            }
            Svc::Reveal { any } => self.reveal(st, any),
            Svc::Granting { next } => self.granting(st, next),
            Svc::Won { rank, user, claim } => {
                let home = self.cfg.home(user);
                st.nodes[usize::from(home)].master.won(user, claim);
                Svc::Granted { rank }
            }
            Svc::Granted { rank } => {
                st.ledger.granted = st.ledger.granted.max(rank);
                Svc::Granting { next: rank + 1 }
            }
        };
        true
    }

    /// Every shard closed: the settle waits (the next tick closes and looks again), or
    /// the ranks are the ledger's best.
    fn settle(&self, st: &State, accepted: u32, unread: bool) -> Svc {
        if self.settle_waits(st, accepted, unread) && !st.timed_out {
            // Waits: the next tick closes and looks again.
            Svc::Idle
        } else {
            Svc::Record {
                ranks: st.ledger.best(self.cfg.k()),
                total: st.ledger.entries.len() as u32,
            }
        }
    }

    /// `draws::record`, then the marking; refused, the pass ends.
    fn record_step(&self, st: &mut State, ranks: Vec<(User, Prio)>, total: u32) -> Svc {
        if self.record(st, ranks, total) {
            st.targets.iter_mut().for_each(|t| *t = None);
            Svc::Marking {
                next: 0,
                any: false,
            }
        } else {
            // An error: the pass ends, the next one draws again.
            Svc::Idle
        }
    }

    /// The seed shown, when a shard was marked or it is hidden; the grants next if due.
    fn reveal(&self, st: &mut State, any: bool) -> Svc {
        if any || !st.revealed {
            st.revealed = true;
        }
        if self.due(st) {
            Svc::Granting {
                next: st.ledger.granted + 1,
            }
        } else {
            Svc::Idle
        }
    }

    /// `entries_last` on shard `next`: its stream's last id (the target kept while the
    /// master is the same), and whether the ledger's place has reached it.
    fn last(&self, st: &mut State, next: u8, accepted: u32, unread: bool) -> Svc {
        let s = usize::from(next);
        let node = &st.nodes[s];
        let last = node.master.stream.keys().next_back().copied().unwrap_or(0);
        let target = match st.targets[s] {
            Some((r, id)) if r == node.replid => id,
            _ => {
                st.targets[s] = Some((node.replid, last));
                last
            }
        };
        let place = st.ledger.places[s];
        let read = place.replid == Some(node.replid) && place.last >= target;
        let unread = unread || !read;
        if next + 1 == self.cfg.shards {
            Svc::Settle { accepted, unread }
        } else {
            Svc::Closing {
                next: next + 1,
                accepted,
                unread,
            }
        }
    }

    /// `draw_state` of shard `next`: a closed shard is marked, an open one closed first.
    fn marking(&self, st: &mut State, next: u8, any: bool) -> Svc {
        let wins = if self.cfg.mutant_is(DrawMutant::MarksWithoutWins) {
            Svc::Mark { next, any }
        } else {
            Svc::Wins { next, any }
        };
        let master = &mut st.nodes[usize::from(next)].master;
        match master.state() {
            Some(DrawState::Closed) => wins,
            // Rolled back past its close by a failover: closed first.
            Some(DrawState::Open) if !self.cfg.mutant_is(DrawMutant::MarkOnlyDue) => {
                master.close();
                wins
            }
            _ => self.after_marking(next, any),
        }
    }

    /// The grant of rank `next`, when there is one.
    fn granting(&self, st: &mut State, next: u32) -> Svc {
        let Some(&(user, _)) = st
            .ledger
            .ranks
            .as_ref()
            .and_then(|r| r.get(next as usize - 1))
        else {
            return Svc::Idle;
        };
        match self.grant(st, user) {
            Some(claim) => Svc::Won {
                rank: next,
                user,
                claim,
            },
            // Sold out: the waitlist waits for units to come back.
            None if self.cfg.mutant_is(DrawMutant::GrantsPastSoldOut) => {
                Svc::Granting { next: next + 1 }
            }
            None => Svc::Idle,
        }
    }

    /// The grant: one unit under request id `draw`, replayed when made before; its stored
    /// answer on the user's home shard, confirmed on the replica. `None`: sold out.
    fn grant(&self, st: &mut State, user: User) -> Option<ClaimRef> {
        if let Some(&c) = st.ledger.answers.get(&user) {
            return Some(c);
        }
        if st.ledger.left == 0 {
            return None;
        }
        st.ledger.left -= 1;
        let id = st.ledger.claims.len() as u32 + 1;
        st.ledger.claims.insert(
            id,
            Claim {
                user,
                released: false,
            },
        );
        let c = ClaimRef {
            id,
            shard: self.cfg.home(user),
        };
        st.ledger.answers.insert(user, c);
        let n = &mut st.nodes[usize::from(self.cfg.home(user))];
        n.master.grants.insert(user, GrantAnswer::Claim(c));
        n.replica.grants.insert(user, GrantAnswer::Claim(c));
        Some(c)
    }
}

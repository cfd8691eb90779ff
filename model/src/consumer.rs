//! The consumer's data path: read a shard's claims stream, commit what a replica holds
//! into the ledger (insert ignored by claim id, a late claim applied), then settle the
//! entries (make a committed reroute's answer final, delete the entry). Also its
//! resolution of holds a crashed gateway left behind.

use crate::keyspace::{Answer, ClaimId, Record, ShardId, User};
use crate::mutant::Mutant;
use crate::scripts::{self, Verb};
use crate::system::{Action, State, System};

impl System {
    pub(crate) fn consumer_actions(&self, st: &State, out: &mut Vec<Action>) {
        let crash = self.cfg.ops.consumer_crash && self.can_fault(st);
        for (s, n) in st.nodes.iter().enumerate() {
            if !n.master.stream.is_empty() {
                let shard = s as ShardId;
                out.push(Action::Consume { shard, ack: true });
                if crash {
                    out.push(Action::Consume { shard, ack: false });
                }
            }
        }
        for (s, n) in st.nodes.iter().enumerate() {
            for (&(user, seq), h) in &n.master.holds {
                if h.expires < st.now {
                    out.push(Action::ResolveHold {
                        shard: s as ShardId,
                        user,
                        seq,
                    });
                }
            }
        }
    }

    /// One consumer round on a shard: XREADGROUP of every entry in its stream, a fence, the
    /// ledger transaction, then the settle (`ack`). Without `ack`, the consumer crashed
    /// between commit and ack (or a second consumer took the entries over and has not
    /// settled them): the entries stay and are read again. The reader's pause between read
    /// and commit, where a failover could roll the entries back, is closed by committing
    /// only under a fence on the master it read (with [`Mutant::CommitBeforeReplica`],
    /// without one).
    pub(crate) fn consume(&self, st: &mut State, shard: ShardId, ack: bool) -> bool {
        if !ack {
            st.faults += 1;
        }
        let entries: Vec<_> = st.nodes[usize::from(shard)]
            .master
            .stream
            .iter()
            .map(|(&e, r)| (r.claim_id(e), *r))
            .collect();
        if !self.cfg.mutant_is(Mutant::CommitBeforeReplica) {
            st.sync(shard);
        }
        for &(id, rec) in &entries {
            let late = rec.gen < st.ledger.rebuild_gen;
            if st.ledger.insert(id, rec, late) && late {
                self.apply_late(st, id, rec);
            }
        }
        if ack {
            self.ack(st, shard, &entries);
        } else {
            st.unacked.extend(entries.iter().map(|(id, _)| *id));
        }
        true
    }

    /// `rebuild_late.lua`: a claim the last rebuild did not count comes off its slice (a
    /// shortfall is debt: sold twice), and onto its user's count, sequence and answer.
    fn apply_late(&self, st: &mut State, id: ClaimId, rec: Record) {
        let sh = st.master(rec.shard);
        if let Some(slice) = sh.stock {
            let short = (rec.qty - slice).max(0);
            sh.stock = Some((slice - rec.qty).max(0));
            sh.debt += short;
            if short > 0 {
                st.ledger.oversold = st.ledger.oversold.saturating_add(1);
            }
        }
        let home = st.master(rec.home);
        *home.users.entry(rec.user).or_insert(0) += rec.qty;
        let s = home.useq.entry(rec.user).or_insert(0);
        *s = (*s).max(rec.seq);
        // A hold of its own still standing is settled as kept.
        home.holds.remove(&(rec.user, rec.seq));
        if let Some(rid) = rec.rid {
            home.req.insert(
                (rec.user, rid),
                Answer::Done {
                    claim: id,
                    shard: rec.shard,
                    qty: rec.qty,
                    tentative: false,
                },
            );
        }
        st.sync(rec.shard);
        st.sync(rec.home);
    }

    /// `stream_ack.lua`, after `final_answers`: a committed reroute's answer is made final
    /// on its home, then its entry leaves the stream.
    fn ack(&self, st: &mut State, shard: ShardId, entries: &[(ClaimId, Record)]) {
        for &(id, rec) in entries {
            st.unacked.remove(&id);
            if rec.shard != rec.home {
                if let Some(rid) = rec.rid {
                    let fin = Answer::Done {
                        claim: id,
                        shard: rec.shard,
                        qty: rec.qty,
                        tentative: false,
                    };
                    scripts::settle(
                        st.master(rec.home),
                        rec.user,
                        0,
                        Verb::Final(fin),
                        Some(rid),
                        None,
                    );
                    st.sync(rec.home);
                }
            }
            st.master(shard).stream.remove(&id.entry);
        }
        st.sync(shard);
    }

    /// A hold past its expiry (Redis's clock): kept when a record of its `(user, seq)` is
    /// in the ledger or a stream (a stream of another shard only once a replica of that
    /// shard holds it), undone otherwise.
    pub(crate) fn resolve_hold(&self, st: &mut State, home: ShardId, user: User, seq: u32) -> bool {
        let hold = st.nodes[usize::from(home)].master.holds[&(user, seq)];
        let found = st.ledger.find(user, seq, home).or_else(|| {
            st.nodes.iter().find_map(|n| {
                n.master
                    .stream
                    .iter()
                    .find(|(_, r)| r.user == user && r.seq == seq && r.home == home)
                    .map(|(&e, r)| (r.claim_id(e), *r))
            })
        });
        let verb = match found {
            Some((claim, rec)) => {
                st.sync(rec.shard);
                Verb::Keep(Answer::Done {
                    claim,
                    shard: rec.shard,
                    qty: rec.qty,
                    tentative: false,
                })
            }
            None => Verb::Undo,
        };
        scripts::settle(st.master(home), user, seq, verb, hold.rid, None);
        st.sync(home);
        true
    }
}

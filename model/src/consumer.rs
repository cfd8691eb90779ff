//! The offset consumer (`/work/notes/offset-design.md`): per shard, read the claims stream
//! after the ledger's offset (from the start when the master's replication id is not the
//! offset's: the new master rule), fence, commit the rows (insert ignored by claim id, a
//! late claim applied) and move the offset in the same transaction, conditional on the
//! offset the read started from and on the reader's lease epoch; then make committed
//! reroutes' answers final and trim what is committed (`stream_trim.lua`). Also its
//! resolution of holds a crashed gateway left behind.

use crate::keyspace::{Answer, ClaimId, Record, ShardId, User};
use crate::ledger::Offset;
use crate::mutant::Mutant;
use crate::scripts::{self, Verb};
use crate::system::{Action, Stalled, State, System};

impl System {
    pub(crate) fn consumer_actions(&self, st: &State, out: &mut Vec<Action>) {
        let crash = self.cfg.ops.consumer_crash && self.can_fault(st);
        for s in 0..self.cfg.shards {
            if !self.read(st, s).3.is_empty() {
                out.push(Action::Consume {
                    shard: s,
                    crash: false,
                });
                if crash {
                    out.push(Action::Consume {
                        shard: s,
                        crash: true,
                    });
                    if st.stalled.is_none() {
                        out.push(Action::Read(s));
                    }
                }
            }
            if self.trimmable(st, s) {
                out.push(Action::Trim(s));
            }
        }
        if let Some(p) = &st.stalled {
            out.push(Action::CommitStalled);
            out.push(Action::DropStalled);
            if p.epoch == st.ledger.streams[usize::from(p.shard)].epoch {
                out.push(Action::Takeover(p.shard));
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

    /// What the shard's live consumer reads next: `(from, to, epoch, entries)`. It holds
    /// the lease; while its own earlier read is stalled (same epoch), its reader goes on
    /// after that read (each read's `from` is the previous read's `to`), otherwise it starts
    /// at the ledger's offset. A master whose replication id is not the offset's is read
    /// from the start (with [`Mutant::OffsetKeptAcrossNewMaster`], after the offset).
    fn read(&self, st: &State, s: ShardId) -> (Offset, Offset, u8, Vec<(u32, Record)>) {
        let row = st.ledger.streams[usize::from(s)];
        let from = match &st.stalled {
            Some(p) if p.shard == s && p.epoch == row.epoch => p.to,
            _ => row.offset,
        };
        let n = &st.nodes[usize::from(s)];
        let new_master = from.repl.is_some_and(|r| r != n.replid)
            && !self.cfg.mutant_is(Mutant::OffsetKeptAcrossNewMaster);
        let after = if new_master { 0 } else { from.last };
        let entries: Vec<_> = n
            .master
            .stream
            .range(after + 1..)
            .map(|(&e, r)| (e, *r))
            .collect();
        let to = Offset {
            last: entries.last().map_or(from.last, |(e, _)| *e),
            repl: Some(n.replid),
        };
        (from, to, row.epoch, entries)
    }

    /// Nothing left for the shard's consumer to read.
    pub fn caught_up(&self, st: &State, s: ShardId) -> bool {
        self.read(st, s).3.is_empty()
    }

    /// One round of the live consumer on a shard: its read, fence and transaction in one
    /// step (the fence on the master it read makes a failover between them harmless: the
    /// promoted replica holds what was read); then, unless it `crash`es, the final answers
    /// and the trim.
    pub(crate) fn consume(&self, st: &mut State, shard: ShardId, crash: bool) -> bool {
        if crash {
            st.faults += 1;
        }
        let (from, to, epoch, entries) = self.read(st, shard);
        if !self.cfg.mutant_is(Mutant::CommitBeforeReplica) {
            st.sync(shard);
        }
        if !self.commit(st, shard, from, to, epoch, &entries) {
            // Rolled back: the reader starts again from the lease (its own: a new epoch).
            let row = &mut st.ledger.streams[usize::from(shard)];
            row.epoch = row.epoch.wrapping_add(1);
            return true;
        }
        if !crash {
            self.after_commit(st, shard, &entries);
        }
        true
    }

    /// A consumer reads the shard after the ledger's offset under its lease and pauses
    /// before its commit (a GC pause, a partition, a writer that has not run the batch).
    pub(crate) fn read_stall(&self, st: &mut State, shard: ShardId) -> bool {
        st.faults += 1;
        let (from, to, epoch, entries) = self.read(st, shard);
        st.stalled = Some(Stalled {
            shard,
            from,
            to,
            epoch,
            entries,
        });
        true
    }

    /// The paused consumer's lease expired; another consumer acquires it (a new epoch) and
    /// reads from the ledger's offset.
    pub(crate) fn takeover(&self, st: &mut State, shard: ShardId) -> bool {
        let row = &mut st.ledger.streams[usize::from(shard)];
        row.epoch = row.epoch.wrapping_add(1);
        true
    }

    /// The paused consumer resumes: its fence drops the read when the master's replication
    /// id changed since; otherwise its conditional commit, refused (nothing committed) when
    /// the offset moved or the lease changed hands.
    pub(crate) fn commit_stalled(&self, st: &mut State) -> bool {
        let p = st.stalled.take().expect("listed");
        if !self.cfg.mutant_is(Mutant::CommitBeforeReplica) {
            if p.to.repl != Some(st.nodes[usize::from(p.shard)].replid) {
                return true;
            }
            st.sync(p.shard);
        }
        if self.commit(st, p.shard, p.from, p.to, p.epoch, &p.entries) {
            self.after_commit(st, p.shard, &p.entries);
        }
        true
    }

    /// The ledger transaction: `UPDATE stream_offsets SET last_id=<to>, repl_id=<to repl>
    /// WHERE epoch=<epoch> AND last_id=<from> AND repl_id=<from repl>` (with
    /// [`Mutant::UnconditionalOffset`], without the `from` terms), and on one row changed,
    /// the rows. False: rolled back, nothing committed.
    fn commit(
        &self,
        st: &mut State,
        shard: ShardId,
        from: Offset,
        to: Offset,
        epoch: u8,
        entries: &[(u32, Record)],
    ) -> bool {
        let row = &mut st.ledger.streams[usize::from(shard)];
        let placed = self.cfg.mutant_is(Mutant::UnconditionalOffset) || row.offset == from;
        if row.epoch != epoch || !placed {
            return false;
        }
        row.offset = to;
        if st.db_refusing {
            // Reached with [`Mutant::ServerErrorIsPoison`] only (otherwise the commit is
            // retried once the database accepts): the rows are kept as poison, and the
            // place moves past them.
            return true;
        }
        for &(e, rec) in entries {
            let id = rec.claim_id(e);
            let late = rec.gen < st.ledger.rebuild_gen;
            if st.ledger.insert(id, rec, late) && late {
                self.apply_late(st, id, rec);
            }
        }
        true
    }

    /// After the commit: a committed reroute's answer is made final on its home, then the
    /// amortized trim.
    fn after_commit(&self, st: &mut State, shard: ShardId, entries: &[(u32, Record)]) {
        for &(e, rec) in entries {
            if rec.shard != rec.home {
                if let Some(rid) = rec.rid {
                    let fin = Answer::Done {
                        claim: rec.claim_id(e),
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
        }
        self.trim(st, shard);
    }

    /// Whether `stream_trim.lua` would remove anything from the shard's master now, under
    /// its guard: issued only for an offset committed under the master's current
    /// replication id, and run only when the stream's last id is at or above the offset
    /// (below, the master lost the history the offset was read in and may hold entries at
    /// or below it that are not committed). [`Mutant::TrimPastCommitted`]: no guard.
    pub(crate) fn trimmable(&self, st: &State, s: ShardId) -> bool {
        let n = &st.nodes[usize::from(s)];
        let off = st.ledger.streams[usize::from(s)].offset;
        let guard = self.cfg.mutant_is(Mutant::TrimPastCommitted)
            || (off.repl == Some(n.replid) && n.master.last_id >= off.last);
        guard && n.master.stream.range(..off.last).next().is_some()
    }

    /// `XTRIM MINID <offset>`: the entries below the offset leave the master's stream (the
    /// offset's own entry stays, as in `stream_trim.lua`).
    pub(crate) fn trim(&self, st: &mut State, s: ShardId) -> bool {
        if !self.trimmable(st, s) {
            return false;
        }
        let last = st.ledger.streams[usize::from(s)].offset.last;
        let sh = st.master(s);
        sh.stream = sh.stream.split_off(&last);
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

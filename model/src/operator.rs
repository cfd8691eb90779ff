//! What the consumer's campaign side and the operator run: the rebuild from the ledger
//! (`campaign-ops/src/rebuild.rs`), a preheat over a running sale, the release of an unpaid
//! claim (`campaign-ops/src/release.rs`) and a stock wave (`campaign-ops/src/wave.rs`).

use crate::keyspace::{Answer, ClaimId, Event, Meta, Shard, ShardId};
use crate::ledger::{Row, Status, WaveState};
use crate::mutant::Mutant;
use crate::scripts::{self, PreheatReply};
use crate::system::{Action, State, System, END, START, WAVE_ID};

impl System {
    pub(crate) fn operator_actions(&self, st: &State, out: &mut Vec<Action>) {
        if self.needs_rebuild(st) {
            out.push(Action::Rebuild);
        }
        if !self.can_fault(st) {
            // Operations share the fault budget; a started release or wave still ends.
            return self.finishing_actions(st, out);
        }
        if self.cfg.ops.repreheat && !st.repreheated {
            out.push(Action::Repreheat);
        }
        if st.releases < self.cfg.ops.releases {
            for (&id, row) in &st.ledger.claims {
                if row.status == Status::Active {
                    out.push(Action::ReleaseBegin(id));
                }
            }
        }
        if self.cfg.ops.wave > 0 && st.ledger.waves.is_empty() {
            out.push(Action::WavePlace);
        }
        self.finishing_actions(st, out);
    }

    fn finishing_actions(&self, st: &State, out: &mut Vec<Action>) {
        for (&id, row) in &st.ledger.claims {
            if row.status == Status::Releasing {
                out.push(Action::ReleaseRedis(id));
            }
        }
        if let Some((_, WaveState::Pending)) = st.ledger.waves.get(&WAVE_ID) {
            out.push(Action::WaveRedis);
        }
    }

    /// The watch: a slice or meta missing (Redis lost it), or a shard behind the ledger's
    /// generation (a failover rolled a rebuild's write back).
    fn needs_rebuild(&self, st: &State) -> bool {
        st.nodes.iter().any(|n| {
            n.master.stock.is_none()
                || n.master.meta.is_none()
                || n.master.gen() < st.ledger.rebuild_gen
        })
    }

    /// Fence every shard, insert the claims still in the streams, bump the generation, and
    /// write each shard back from the ledger; every shard confirmed on its replica.
    pub(crate) fn rebuild(&self, st: &mut State) -> bool {
        if !self.cfg.mutant_is(Mutant::RebuildIgnoresStreams) {
            for s in 0..self.cfg.shards {
                let entries: Vec<_> = st.nodes[usize::from(s)]
                    .master
                    .stream
                    .iter()
                    .map(|(&e, r)| (r.claim_id(e), *r))
                    .collect();
                for (id, rec) in entries {
                    st.ledger.insert(id, rec, false);
                }
            }
        }
        st.ledger.rebuild_gen += 1;
        let gen = st.ledger.rebuild_gen;
        let mut events = Vec::new();
        for s in 0..self.cfg.shards {
            events.push(self.rebuild_shard(st, s, gen));
            st.sync(s);
        }
        st.publish(&events);
        st.rebuilds = st.rebuilds.saturating_add(1);
        true
    }

    /// Shard `s` written back from the ledger under generation `gen`: its slice (its share
    /// of the stock and the applied waves, less what the ledger sold), the meta, the rows
    /// of its users and of its stream, the holds kept, the waves. The event it publishes.
    fn rebuild_shard(&self, st: &mut State, s: ShardId, gen: u32) -> Event {
        let share = self.cfg.share(st.ledger.base_stock, s)
            + st.ledger
                .waves
                .values()
                .filter(|(_, w)| *w == WaveState::Applied)
                .map(|(u, _)| self.cfg.share(*u, s))
                .sum::<i32>();
        let sold: i32 = st
            .ledger
            .unreleased()
            .filter(|(id, _)| id.shard == s)
            .map(|(_, r)| r.rec.qty)
            .sum();
        let ledger = st.ledger.clone();
        let sh = st.master(s);
        sh.stock = Some((share - sold).max(0));
        sh.debt = (sold - share).max(0);
        sh.meta = Some(Meta {
            limit: self.cfg.limit,
            start: START,
            end: END,
            gen,
            fenced: false,
        });
        sh.users.clear();
        for (id, row) in &ledger.claims {
            self.rebuild_row(sh, s, *id, row);
        }
        // Holds are kept; one whose claim the ledger does not hold counts for its user.
        let holds: Vec<_> = sh.holds.iter().map(|(&k, h)| (k, h.qty)).collect();
        for ((user, seq), qty) in holds {
            if ledger.find(user, seq, s).is_none() {
                *sh.users.entry(user).or_insert(0) += qty;
            }
            let q = sh.useq.entry(user).or_insert(0);
            *q = (*q).max(seq);
        }
        sh.waves = ledger
            .waves
            .iter()
            .filter(|(_, (_, w))| *w == WaveState::Applied)
            .map(|(&id, (u, _))| (id, self.cfg.share(*u, s)))
            .collect();
        if sh.stock == Some(0) {
            Event::Empty(s)
        } else {
            Event::Restock(s)
        }
    }

    /// One ledger row on shard `s`: on its user's home, the user's count and seq, its
    /// stored answer and release; on the shard that took it, the id floor and release.
    fn rebuild_row(&self, sh: &mut Shard, s: ShardId, id: ClaimId, row: &Row) {
        let r = row.rec;
        if r.home == s {
            if row.status != Status::Released {
                *sh.users.entry(r.user).or_insert(0) += r.qty;
            }
            let q = sh.useq.entry(r.user).or_insert(0);
            *q = (*q).max(r.seq);
            if let Some(rid) = r.rid {
                sh.req.insert(
                    (r.user, rid),
                    Answer::Done {
                        claim: id,
                        shard: r.shard,
                        qty: r.qty,
                        tentative: false,
                    },
                );
            }
            if row.status == Status::Released {
                sh.reluser.insert(id);
            }
        }
        if id.shard == s {
            if self.cfg.ops.rebuild_floor {
                sh.last_id = sh.last_id.max(id.entry);
            }
            if row.status == Status::Released {
                sh.relstock.insert(id);
            }
        }
    }

    /// `consumer preheat` over a running sale: with every slice live and no claim in the
    /// ledger, preheat.lua on each shard (a live slice keeps its value); otherwise the
    /// rebuild path.
    pub(crate) fn repreheat(&self, st: &mut State) -> bool {
        st.faults += 1;
        st.repreheated = true;
        let live = st
            .nodes
            .iter()
            .all(|n| n.master.stock.is_some() && n.master.meta.is_some());
        if !live || !st.ledger.claims.is_empty() {
            return self.rebuild(st);
        }
        for s in 0..self.cfg.shards {
            let slice = self.cfg.share(st.ledger.base_stock, s);
            let r = scripts::preheat(
                st.master(s),
                slice,
                self.cfg.limit,
                START,
                END,
                self.cfg.mutant,
            );
            if matches!(r, PreheatReply::Preheated { .. }) {
                st.publish(&[Event::Restock(s)]);
            }
            st.sync(s);
        }
        true
    }

    /// Ledger `→ releasing` (payment timeout or cancel).
    pub(crate) fn release_begin(&self, st: &mut State, id: crate::keyspace::ClaimId) -> bool {
        st.releases += 1;
        st.faults += 1;
        st.ledger.claims.get_mut(&id).expect("listed").status = Status::Releasing;
        true
    }

    /// The Redis step (slice and user count back once per claim id), then `→ released`
    /// once both shards are confirmed on a replica. A step that found a shard fenced or
    /// missing stays `releasing`. As `StockClient::release` does
    /// (`shard-router/src/client/release.rs`), a stock half that finds no slice (Redis lost
    /// it, or a rebuild's fence holds it) leaves the user's count alone too: the retry after
    /// the rebuild does both halves.
    pub(crate) fn release_redis(&self, st: &mut State, id: crate::keyspace::ClaimId) -> bool {
        let rec = st.ledger.claims[&id].rec;
        let mut ev = Vec::new();
        let stock = scripts::release_stock(st.master(id.shard), id, rec.qty, id.shard, &mut ev);
        let user = if stock == scripts::ReleaseReply::NotPreheated {
            scripts::ReleaseReply::NotPreheated
        } else {
            scripts::release_user(st.master(rec.home), id, rec.user, rec.qty)
        };
        st.publish(&ev);
        st.sync(id.shard);
        st.sync(rec.home);
        let done = |r| !matches!(r, scripts::ReleaseReply::NotPreheated);
        if done(stock) && done(user) {
            st.ledger.claims.get_mut(&id).expect("listed").status = Status::Released;
        }
        true
    }

    pub(crate) fn wave_place(&self, st: &mut State) -> bool {
        st.faults += 1;
        st.ledger
            .waves
            .insert(WAVE_ID, (self.cfg.ops.wave, WaveState::Pending));
        true
    }

    /// wave.lua on every shard (once per wave id), then the ledger marks the wave applied
    /// once every shard is confirmed; a shard without a slice leaves it pending.
    pub(crate) fn wave_redis(&self, st: &mut State) -> bool {
        let units = self.cfg.ops.wave;
        let mut all = true;
        for s in 0..self.cfg.shards {
            let mut ev = Vec::new();
            let share = self.cfg.share(units, s);
            let r = scripts::wave(st.master(s), WAVE_ID, share, s as ShardId, &mut ev);
            st.publish(&ev);
            st.sync(s);
            all &= !matches!(r, scripts::WaveReply::NotPreheated);
        }
        if all {
            st.ledger.waves.insert(WAVE_ID, (units, WaveState::Applied));
        }
        true
    }
}

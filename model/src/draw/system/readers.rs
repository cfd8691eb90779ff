//! The entries readers (`campaign-ops/src/draw/entries.rs`): a read of a shard's stream
//! after the ledger's place, its commit under the place's compare-and-set, and the
//! guarded trim behind them.

use super::{DrawSystem, LedgerEntry, Place, Read, State};
use crate::draw::config::DrawMutant;
use crate::draw::scripts::{EntryId, Prio, User};

impl DrawSystem {
    /// What a reader's round on `s` would read: `None` when it has nothing to commit (an
    /// empty read under the place's master).
    pub fn read_of(&self, st: &State, s: u8) -> Option<Read> {
        let place = st.ledger.places[usize::from(s)];
        let node = &st.nodes[usize::from(s)];
        // The new-master rule: read again from 0-0, and the new place is where that read
        // ended, 0-0 when it found nothing.
        let new_master = place.replid.is_some_and(|r| r != node.replid);
        let after = if new_master { 0 } else { place.last };
        let rows: Vec<(User, Prio, EntryId)> = node
            .master
            .stream
            .range(after + 1..)
            .map(|(&id, e)| (e.user, e.prio, id))
            .collect();
        let base = if new_master && !self.cfg.mutant_is(DrawMutant::PlaceKeptAcrossNewMaster) {
            0
        } else {
            place.last
        };
        let to = Place {
            last: rows.last().map_or(base, |r| r.2),
            replid: Some(node.replid),
        };
        if to == place {
            return None;
        }
        Some(Read {
            shard: s,
            from: place,
            to,
            rows,
        })
    }

    pub(super) fn commit(&self, st: &mut State, r: Read) -> bool {
        let place = &mut st.ledger.places[usize::from(r.shard)];
        if *place != r.from && !self.cfg.mutant_is(DrawMutant::UnconditionalPlace) {
            // Refused: another reader moved the place; the next round reads from there.
            return true;
        }
        *place = r.to;
        if st.ledger.ranks.is_some() && !self.cfg.mutant_is(DrawMutant::EntriesAfterDrawJoin) {
            // Drawn already (the settle gave up): skipped with the anomaly
            // draw_entry_after_draw; the place moves.
            return true;
        }
        for (u, prio, id) in r.rows {
            st.ledger.entries.entry(u).or_insert(LedgerEntry {
                prio,
                shard: r.shard,
                id,
            });
        }
        true
    }

    /// stream_trim.lua's guard: the master is the place's, and its stream reached it.
    pub(super) fn trim_due(&self, st: &State, s: u8) -> bool {
        let place = st.ledger.places[usize::from(s)];
        let node = &st.nodes[usize::from(s)];
        place.replid == Some(node.replid)
            && node.master.last_id >= place.last
            && node.master.stream.range(..=place.last).next().is_some()
            && self.read_of(st, s).is_none()
    }

    /// The trim itself: the stream up to the committed place goes.
    pub(super) fn trim(st: &mut State, s: u8) {
        let last = st.ledger.places[usize::from(s)].last;
        let m = &mut st.nodes[usize::from(s)].master;
        m.stream = m.stream.split_off(&(last + 1));
    }
}

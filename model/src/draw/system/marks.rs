//! mark_shard, in its two halves: the wins (`W|`) of the ledger's grants and the ranks,
//! written by the draw service after the draw and by the restore onto a shard it holds.

use super::{DrawSystem, State};
use crate::draw::scripts::{ClaimRef, CountReply, MarkBatch, User};

impl DrawSystem {
    /// The first half of mark_shard: the wins of the users whose home is `s`, from
    /// draws::wins (each grant's claim, recorded on its rank before the `W|` and before
    /// `granted_rank` moves; here the grant's claim is in the ledger from the grant's
    /// step). A shard the restore opened from a stale read of the draw (still open) has
    /// none, and the marks never write one.
    pub(super) fn write_wins(&self, st: &mut State, s: u8) {
        let wins: Vec<(User, ClaimRef)> = st
            .ledger
            .claims
            .iter()
            .filter(|(_, c)| self.cfg.home(c.user) == s)
            .map(|(&id, c)| (c.user, ClaimRef { id, shard: s }))
            .collect();
        for (u, c) in wins {
            st.nodes[usize::from(s)].master.won(u, c);
        }
    }

    /// mark_shard: the ranks of the users whose home is `s`, the last batch (`held`: the
    /// restore's, on the shard it holds under that token; then the batches written under
    /// it, none when no user of the shard has a rank, or `None` when not held under it).
    pub(super) fn mark_shard(&self, st: &mut State, s: u8, held: Option<u8>) -> Option<u32> {
        let mine: Vec<(User, u32)> = st
            .ledger
            .ranks
            .iter()
            .flatten()
            .enumerate()
            .filter(|(_, (u, _))| self.cfg.home(*u) == s)
            .map(|(i, (u, _))| (*u, i as u32 + 1))
            .collect();
        let batch = match held {
            Some(_) if mine.is_empty() => return Some(0),
            Some(token) => MarkBatch::Held(token),
            None => MarkBatch::Last,
        };
        match st.nodes[usize::from(s)].master.mark(batch, &mine) {
            CountReply::Done(_) => Some(1),
            CountReply::NotPreheated => None,
        }
    }
}

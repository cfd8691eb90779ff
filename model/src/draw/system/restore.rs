//! The restore loop (`campaign-ops/src/draw/restore.rs`): a shard found without its draw
//! is opened held under a token, given the ledger's entries, then (drawn) its wins and
//! marks, and published with the state only where the hold counts the restore's writes.

use super::{DrawSystem, State};
use crate::draw::config::DrawMutant;
use crate::draw::scripts::{CountReply, DrawState, EntryId, Prio, User};

/// The restore loop (`draw::restore`): which shard, with the ledger's state as read when
/// it started (`drawn`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Restore {
    Idle,
    /// The ledger's draw read: `draw_open` held (no state) next.
    Found {
        shard: u8,
        drawn: bool,
    },
    /// Opened held under `token`: `draw_restore` of the ledger's entries next.
    Opened {
        shard: u8,
        drawn: bool,
        token: u8,
    },
    /// Drawn: the wins (`W|`) from the ledger's grants next; `n` writes counted so far.
    Wins {
        shard: u8,
        token: u8,
        n: u32,
    },
    /// The marks next.
    Marks {
        shard: u8,
        token: u8,
        n: u32,
    },
    /// Everything back: the clock and `draw_open` with the state next, published only
    /// where the hold counts the restore's `n` writes.
    Publish {
        shard: u8,
        drawn: bool,
        token: u8,
        n: u32,
    },
}

impl DrawSystem {
    /// The state a restore gives a shard: drawn once its marks are back; past the draw
    /// time by Redis's clock a draw the ledger has open comes back closed.
    fn restored_state(st: &State, drawn: bool) -> DrawState {
        if drawn {
            DrawState::Drawn
        } else if st.past {
            DrawState::Closed
        } else {
            DrawState::Open
        }
    }

    /// The restore's pages on a shard it holds under `token` (one counted write here: the
    /// model restores every entry in one call); what it does next.
    fn restore_entries(&self, st: &mut State, shard: u8, drawn: bool, token: u8) -> Restore {
        let batch: Vec<(User, Prio, EntryId)> = st
            .ledger
            .entries
            .iter()
            .filter(|(_, e)| e.shard == shard)
            .map(|(&u, e)| (u, e.prio, e.id))
            .collect();
        let reply = st.nodes[usize::from(shard)].master.restore(token, &batch);
        let n = 1;
        if reply == CountReply::NotPreheated {
            Restore::Idle
        } else if !drawn {
            Restore::Publish {
                shard,
                drawn,
                token,
                n,
            }
        } else if self.cfg.mutant_is(DrawMutant::RestoreWithoutWins) {
            Restore::Marks { shard, token, n }
        } else {
            Restore::Wins { shard, token, n }
        }
    }

    pub fn restore_step(&self, st: &mut State) -> bool {
        match st.restore {
            Restore::Idle => {
                let Some(shard) = (0..self.cfg.shards)
                    .find(|&s| st.nodes[usize::from(s)].master.state().is_none())
                else {
                    return false;
                };
                st.restore = Restore::Found {
                    shard,
                    drawn: st.ledger.ranks.is_some(),
                };
            }
            Restore::Found { shard, drawn } => {
                let state = if self.cfg.mutant_is(DrawMutant::RestoreOpensAtOnce) {
                    Some(Self::restored_state(st, drawn))
                } else {
                    None
                };
                let token = st.next_token;
                st.next_token += 1;
                st.nodes[usize::from(shard)]
                    .master
                    .open(self.open_args(state, token, None));
                st.restore = Restore::Opened {
                    shard,
                    drawn,
                    token,
                };
            }
            Restore::Opened {
                shard,
                drawn,
                token,
            } => st.restore = self.restore_entries(st, shard, drawn, token),
            Restore::Wins { shard, token, n } => {
                self.write_wins(st, shard);
                st.restore = if self.cfg.mutant_is(DrawMutant::RestoreWithoutMark) {
                    Restore::Publish {
                        shard,
                        drawn: true,
                        token,
                        n,
                    }
                } else {
                    Restore::Marks { shard, token, n }
                };
            }
            Restore::Marks { shard, token, n } => {
                st.restore = match self.mark_shard(st, shard, Some(token)) {
                    Some(marks) => Restore::Publish {
                        shard,
                        drawn: true,
                        token,
                        n: n + marks,
                    },
                    None => Restore::Idle,
                };
            }
            Restore::Publish {
                shard,
                drawn,
                token,
                n,
            } => {
                let state = Self::restored_state(st, drawn);
                st.nodes[usize::from(shard)].master.open(self.open_args(
                    Some(state),
                    token,
                    Some(n),
                ));
                st.restore = Restore::Idle;
            }
        }
        true
    }
}
